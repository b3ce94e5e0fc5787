"""Watch every process's command line for a secret while a play runs.

Why: "the key never reaches a process list" is only testable by looking at
the process list while the key is in use. The target container shares this
kernel, so /proc here shows its processes too (docker exec, docker login,
the Ansible modules).

The same samples show how Ansible ran each module: piped into `python3`'s stdin
(pipelining, what production's SSH + sudo does) or copied to the host and run from
a file, `python3 .../AnsiballZ_<module>.py`, which costs four more round trips
per task (make a directory, copy, chmod, remove) and is what a `become` method
without pipelining support (`su`) falls back to. Only the target's processes count for
that (`scope`: the container's ID, which every process in it carries in /proc/PID/cgroup):
the suite runs other plays at the same time, some of them over the local connection, which
copies its modules (`ansible_connection=local` with the controller's python).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import TracebackType

# In the command line of a module Ansible copied to the host instead of piping it.
UNPIPELINED_MODULE = b"/AnsiballZ_"


class CommandLineWatch:
    """Samples /proc/*/cmdline until stopped; remembers command lines containing the secret.

    It also remembers command lines of modules run from a copied file (`unpipelined`): of
    every process, or with `scope` only of the processes whose cgroup path names it (a
    container's ID). The secret counts on any process: a leak anywhere is a leak.
    """

    def __init__(self, secret: str, interval: float = 0.02, scope: str | None = None) -> None:
        self._secret = secret.encode()
        self._scope = scope.encode() if scope is not None else None
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmdline-watch", daemon=True)
        self.samples = 0
        self.leaks: list[str] = []
        self.unpipelined: list[str] = []

    def _run(self) -> None:
        while not self._stop.is_set():
            for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
                try:
                    data = cmdline.read_bytes()
                except OSError:  # the process ended between listing and reading
                    continue
                if self._secret in data:
                    self.leaks.append(self._shown(data))
                if UNPIPELINED_MODULE in data and self._in_scope(cmdline.parent):
                    self.unpipelined.append(self._shown(data))
            self.samples += 1
            self._stop.wait(self._interval)

    def _in_scope(self, process: Path) -> bool:
        """Whether the process belongs to the watched container (any process without a scope)."""
        if self._scope is None:
            return True
        try:
            return self._scope in (process / "cgroup").read_bytes()
        except OSError:  # it ended meanwhile
            return False

    def _shown(self, cmdline: bytes) -> str:
        """A command line as text, arguments space-separated, the secret masked."""
        return cmdline.replace(b"\0", b" ").replace(self._secret, b"<KEY>").decode(errors="replace")

    def __enter__(self) -> CommandLineWatch:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
