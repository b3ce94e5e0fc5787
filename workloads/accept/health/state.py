"""What ``workloads health`` remembers between runs, so an XID is reported once and not forever.

The kernel log holds every XID since boot; a check run every few minutes would otherwise
report an XID from this morning at every run for the rest of the boot. So each run keeps,
in a small JSON file:

* ``boot_id`` and ``after_us``: the cursor. This boot's identity
  (``/proc/sys/kernel/random/boot_id``) and the kernel timestamp of the last log line the
  run read. The next run of the same boot counts only lines after it; a new boot starts
  from the beginning of its own log (the ring buffer and ``journalctl -b`` start afresh).
  Lines are ordered by the kernel's own clock, so the cursor is exact up to lines printed
  in the same microsecond as the last one read.
* ``open``: the failures an event raised (an XID whose action is a reset or a reboot),
  held until the action is done. The XID itself is never logged again, but the GPU is not
  healthy until someone reset it: a reboot (a new ``boot_id``) clears them, and so does
  ``workloads health --clear``, which the operator runs after resetting the GPU.
* ``first_seen``: when each failure still failing was first found (device and item), so a
  drain reason keeps its first time however many runs repeat it.
* ``nvlink``: each GPU's NVLink error counters as last read, so a run judges what was added
  since the last one, not everything since the driver loaded.
* ``replays``: each GPU's PCIe replay count and when it was read, to rate the next
  reading (replays per minute between runs, against NVIDIA's limit).

One run at a time: a run holds ``.health.lock`` beside the state from reading it to writing
it back, so slurmd's periodic run and an operator's ``--clear`` cannot undo each other.

The file is written as root's, mode 0600, in a directory of root's that nobody else can
write (``workloads.safefs``), replaced atomically; one that cannot be parsed is set aside
and the run starts afresh (saying so), never trusted partly.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads import safefs
from workloads.bounded import loads_json

DEFAULT = Path("/var/lib/workloads/health-state.json")
VERSION = 1


@dataclass
class OpenFailure:
    """A failure an event raised that stays until a reboot or ``--clear``."""

    device: str
    item: str
    reason: str
    action: str
    seen_at: float  # wall-clock time of the run that found it
    meaning: str = ""  # NVIDIA's meaning of the event, for the drain reason of later runs


@dataclass
class State:
    boot_id: str | None = None
    after_us: int | None = None
    open: list[OpenFailure] = field(default_factory=list)
    replays: dict[str, int] = field(default_factory=dict)  # bus address -> count
    replays_at: float | None = None
    first_seen: dict[str, float] = field(default_factory=dict)  # "device|item" -> time
    nvlink: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # bus->link->counts
    nvlink5: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)  # the same, NVLink5
    runs: int = 0
    last_run: float | None = None
    note: str | None = None  # why an earlier state was not used
    lost: bool = False  # an earlier state existed and could not be read: what was open is unknown

    def as_json(self) -> str:
        data = asdict(self)
        data.pop("note")
        data.pop("lost")
        data["version"] = VERSION
        return json.dumps(data, indent=1, sort_keys=True) + "\n"


def _parse(text: str) -> State:
    data = loads_json(text)
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ValueError("not a state file of this version")
    return State(
        boot_id=_optional(data.get("boot_id"), str),
        after_us=_optional(data.get("after_us"), int),
        open=[
            OpenFailure(
                str(o["device"]), str(o["item"]), str(o["reason"]), str(o["action"]),
                float(o["seen_at"]), str(o.get("meaning", "")),
            )
            for o in data.get("open", [])
        ],
        replays={str(k): int(v) for k, v in dict(data.get("replays", {})).items()},
        replays_at=_optional(data.get("replays_at"), float),
        first_seen={str(k): float(v) for k, v in dict(data.get("first_seen", {})).items()},
        nvlink=_per_link(data.get("nvlink", {})),
        nvlink5=_per_link(data.get("nvlink5", {})),
        runs=int(data.get("runs", 0)),
        last_run=_optional(data.get("last_run"), float),
    )


def _per_link(data: Any) -> dict[str, dict[str, dict[str, int]]]:
    return {
        str(bus): {str(link): {str(k): int(v) for k, v in dict(counts).items()}
                   for link, counts in dict(links).items()}
        for bus, links in dict(data).items()
    }


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def load(path: Path) -> State:
    """The state at ``path``; a fresh one when there is none or it cannot be used."""
    with _directory(path) as dir_fd:
        try:
            # O_NONBLOCK: a FIFO at the name is opened at once (and refused below), not waited on
            fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=dir_fd)
        except FileNotFoundError:
            return State()
        except OSError as exc:
            raise safefs.UnsafePath(path, f"cannot be opened ({exc.strerror})",
                                    "remove it and run again") from None
        with os.fdopen(fd, "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise safefs.UnsafePath(path, "is not a regular file (a FIFO, socket or device)",
                                        "remove it (after checking who put it there)")
            if info.st_uid != os.geteuid() or info.st_nlink != 1:
                raise safefs.UnsafePath(path, f"is owned by uid {info.st_uid} or hard-linked",
                                        "remove it (after checking who put it there)")
            raw = stream.read(1 << 20)
        try:
            return _parse(raw.decode("utf-8", "replace"))
        except (ValueError, KeyError, TypeError) as exc:
            aside = f"{path.name}.unreadable"
            with contextlib.suppress(OSError):
                os.replace(path.name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            return State(note=f"{path} could not be read ({exc}); set aside as {aside}",
                         lost=True)


def save(path: Path, state: State) -> None:
    """Write ``state`` atomically (a new file renamed over the old), mode 0600."""
    state.runs += 1
    state.last_run = time.time()
    with _directory(path) as dir_fd:
        safefs.write_bytes(path, state.as_json().encode(), 0o600, dir_fd=dir_fd)


def prepare(path: Path) -> None:
    """Make and check the state's directory and its lock file (OSError: not possible here)."""
    with _directory(path) as dir_fd:
        os.close(safefs.open_file(path.parent / ".health.lock", os.O_RDWR | os.O_CREAT, 0o600,
                                  dir_fd=dir_fd))


@contextlib.contextmanager
def locked(path: Path, timeout_s: float) -> Iterator[None]:
    """Hold the state's lock; another run holding it past ``timeout_s`` is an error."""
    with _directory(path) as dir_fd:
        fd = safefs.open_file(path.parent / ".health.lock", os.O_RDWR | os.O_CREAT, 0o600,
                              dir_fd=dir_fd)
    try:
        give_up = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > give_up:
                    raise safefs.UnsafePath(
                        path, f"is in use by another health check for over {timeout_s:.0f} s",
                        "wait for it to finish (it has a deadline) and run again",
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def _directory(path: Path) -> Any:
    """A checked descriptor of the state's directory, created (0755) where it is missing."""
    if not path.parent.exists():
        safefs.make_directory(path.parent)
    with safefs.directory_fd(path.parent) as fd:
        yield fd
