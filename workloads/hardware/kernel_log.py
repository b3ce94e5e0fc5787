"""This boot's kernel log, read-only and bounded, summarised as the XID and SXid events in it.

Where it comes from: ``journalctl -k -b -o short-monotonic`` (the journal keeps the whole
boot, where the ring buffer keeps only its last few MiB), else ``dmesg`` (no journal, or one
that does not store kernel messages), else nothing (not permitted: ``kernel.dmesg_restrict``
for a user outside the ``adm``/``systemd-journal`` groups, a container without
``CAP_SYSLOG``), which is itself reported. Both print each line with the kernel's timestamp,
``[seconds.microseconds]`` since boot, which is what "since the last run" is measured in.

Bounded: the reader stops at ``max_bytes`` of output or at ``deadline_s`` seconds, kills
the command and says the scan was incomplete; lines are streamed, never held, and the
events are grouped by device and code as they are read, at most :data:`MAX_GROUPS` groups,
so memory stays small whatever the log holds. Nothing is written anywhere.
"""

from __future__ import annotations

import os
import select
import selectors
import stat
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from workloads.hardware.xid import Event, parse_line, timestamp_us
from workloads.safefs import writing as safe_writing

JOURNAL = ("journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q")
DMESG = ("dmesg",)
MAX_BYTES = 256 << 20
MAX_GROUPS = 512
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class Group:
    """Every event of one code on one device: how many, the first one, the last time."""

    first: Event
    count: int = 0
    last_us: int | None = None


@dataclass
class Scan:
    """What a read of the kernel log found."""

    source: str  # the command or file that was read
    groups: list[Group] = field(default_factory=list)
    lines: int = 0
    last_us: int | None = None  # the latest kernel timestamp read, events or not
    complete: bool = True  # False when cut short by the size or time bound
    error: str | None = None  # why the log could not be read at all
    overflow: int = 0  # events in groups beyond MAX_GROUPS (counted, not kept)

    @property
    def readable(self) -> bool:
        return self.error is None


class _Grouper:
    def __init__(self, after_us: int | None) -> None:
        self.after_us = after_us
        self.by_key: dict[tuple[object, ...], Group] = {}
        self.overflow = 0

    def add(self, event: Event) -> None:
        if (
            self.after_us is not None
            and event.timestamp_us is not None
            and event.timestamp_us <= self.after_us
        ):
            return
        key = (event.kind, event.pci, event.code, event.fatal)
        group = self.by_key.get(key)
        if group is None:
            if len(self.by_key) >= MAX_GROUPS:
                self.overflow += 1
                return
            group = self.by_key[key] = Group(event)
        group.count += 1
        if event.timestamp_us is not None:
            group.last_us = max(group.last_us or 0, event.timestamp_us)


def boot_id(path: Path | None = None) -> str | None:
    """This boot's identity (a UUID the kernel makes at boot), None where it cannot be read."""
    try:
        return (path or BOOT_ID).read_text().strip()[:64] or None
    except OSError:
        return None


def scan(
    path: Path | None = None,
    *,
    after_us: int | None = None,
    deadline_s: float = 20.0,
    max_bytes: int = MAX_BYTES,
    commands: tuple[tuple[str, ...], ...] | None = None,
    uptime_s: float | None = None,
) -> Scan:
    """XID and SXid events of this boot, those after ``after_us`` (kernel time) only if given.

    ``path`` reads a saved kernel log (dmesg's or journalctl's text) instead of the commands;
    with ``uptime_s`` (this boot's age, where the log was saved on this boot), one whose
    lines are later than it is another boot's log (a file saved last week, ``journalctl -k
    -b -1``), refused: this boot's XIDs are not in it.
    """
    deadline = time.monotonic() + deadline_s
    if path is not None:
        found = _scan_file(path, after_us, deadline, max_bytes)
        if uptime_s is not None and found.last_us is not None and \
                found.last_us > (uptime_s + 1.0) * 1e6:
            return Scan(str(path), error=f"{path} reaches {found.last_us / 1e6:,.0f} s after "
                                         f"boot, and this boot is {uptime_s:,.0f} s old: it is "
                                         "another boot's log")
        return found
    errors = []
    commands = commands or (JOURNAL, DMESG)
    for argv in commands:
        reader = _CommandLines(argv, deadline, max_bytes)
        result = _summarise(" ".join(argv[:4]), reader, after_us)
        if reader.error is None and result.lines:
            return result
        if reader.error is None and not reader.complete:
            reader.error = f"`{' '.join(argv)}` printed nothing within the time allowed"
        errors.append(reader.error or f"`{' '.join(argv)}` printed nothing")
    return Scan(" / ".join(" ".join(a[:3]) for a in commands), error="; ".join(errors))


def _summarise(source: str, lines: _FileLines | _CommandLines, after_us: int | None) -> Scan:
    grouper = _Grouper(after_us)
    result = Scan(source)
    for line in lines:
        result.lines += 1
        stamp = timestamp_us(line)
        if stamp is not None:
            result.last_us = stamp if result.last_us is None else max(result.last_us, stamp)
        event = parse_line(line)
        if event is not None:
            grouper.add(event)
    result.groups = list(grouper.by_key.values())
    result.overflow = grouper.overflow
    result.complete = lines.complete
    return result


def _scan_file(path: Path, after_us: int | None, deadline: float, max_bytes: int) -> Scan:
    """A saved log: a file, or a pipe (``--kernel-log /dev/stdin``), read within the bounds.

    Opened without blocking, so a FIFO nobody writes to cannot hold the battery past its
    deadline; a directory is named as one; a file with NUL bytes is not a kernel log's text
    (the journal's own binary file, ``/var/log/journal/.../system.journal``, is the usual
    mistake) and is refused rather than read as a log without XIDs.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        return Scan(str(path), error=f"cannot read {path}: {exc.strerror or exc}")
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            return Scan(str(path), error=f"{path} is a directory, not a saved kernel log")
        lines = _FileLines(fd, deadline, max_bytes)
        found = _summarise(str(path), lines, after_us)
    except OSError as exc:
        return Scan(str(path), error=f"cannot read {path}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    if lines.binary:
        return Scan(str(path), error=f"{path} is not text (it holds NUL bytes: a binary "
                                     "journal file?), not a saved kernel log")
    if not found.lines:  # a boot's log is never empty: the save failed, not the GPUs
        why = "is empty" if found.complete else "gave no line within the time allowed"
        return Scan(str(path), error=f"{path} {why}, not a saved kernel log")
    return found


class _FileLines:
    """The lines of a saved log, read until its end, ``max_bytes`` or the deadline.

    A line longer than 64 KiB comes in pieces; reading waits for a pipe's writer at most
    until the deadline. ``binary`` says a NUL byte was read.
    """

    def __init__(self, fd: int, deadline: float, max_bytes: int) -> None:
        self.fd = fd
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.complete = True
        self.binary = False

    def __iter__(self) -> Iterator[str]:
        read, pending = 0, b""
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0 or read > self.max_bytes:
                self.complete = False
                return
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:  # a pipe with a writer and nothing written yet
                continue
            if not chunk:
                break
            read += len(chunk)
            if b"\0" in chunk:
                self.binary, self.complete = True, False
                return
            *whole, pending = (pending + chunk).split(b"\n")
            while len(pending) > 1 << 16:
                whole.append(pending[: 1 << 16])
                pending = pending[1 << 16:]
            for line in whole:
                yield line.decode("utf-8", "replace") + "\n"
        if pending:
            yield pending.decode("utf-8", "replace")


class _CommandLines:
    """The lines a command prints, read until EOF, ``max_bytes`` or the deadline; then killed."""

    def __init__(self, argv: tuple[str, ...], deadline: float, max_bytes: int) -> None:
        self.argv = argv
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.complete = True
        self.error: str | None = None

    def __iter__(self) -> Iterator[str]:
        env = {"PATH": os.environ.get("PATH") or SAFE_PATH, "LC_ALL": "C", "SYSTEMD_COLORS": "0"}
        try:
            proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
            )
        except OSError as exc:
            self.error = f"`{self.argv[0]}` cannot run: {exc.strerror or exc}"
            return
        assert proc.stdout is not None and proc.stderr is not None
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ, "out")
        selector.register(proc.stderr, selectors.EVENT_READ, "err")
        pending, stderr, read, open_streams = b"", b"", 0, 2
        try:
            while open_streams:
                left = self.deadline - time.monotonic()
                if left <= 0 or read > self.max_bytes:
                    self.complete = False
                    break
                for key, _ in selector.select(timeout=min(left, 1.0)):
                    chunk = os.read(key.fileobj.fileno(), 1 << 16)  # type: ignore[union-attr]
                    if not chunk:
                        selector.unregister(key.fileobj)
                        open_streams -= 1
                    elif key.data == "err":
                        stderr = (stderr + chunk)[-2048:]
                    else:
                        read += len(chunk)
                        *lines, pending = (pending + chunk).split(b"\n")
                        for line in lines:
                            yield line.decode("utf-8", "replace")
                        if len(pending) > 1 << 20:  # one absurd line: keep its start only
                            pending = pending[: 1 << 16]
            if pending and self.complete:
                yield pending.decode("utf-8", "replace")
        finally:
            selector.close()
            if not self.complete or open_streams:  # stopped early (bound, or the caller)
                proc.kill()
            code: int | None
            try:  # the output is all read: the command is exiting, within what is left
                code = proc.wait(timeout=max(0.5, self.deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                self.complete, code = False, None
            proc.stdout.close()
            proc.stderr.close()
        if self.complete and code:
            said = stderr.decode("utf-8", "replace").strip().splitlines()
            why = said[-1] if said else f"exit {code}"
            self.error = f"`{' '.join(self.argv)}` failed: {why}"


class _Unsaved(Exception):
    """This command's lines are no whole log: the copy is not placed."""


def save_copy(target: Path, *, deadline_s: float = 20.0, max_bytes: int = MAX_BYTES,
         commands: tuple[tuple[str, ...], ...] | None = None) -> str | None:
    """Write this boot's kernel log into `target` (0644, for a container's user to read).

    The first of `commands` (journalctl, else dmesg) that prints lines, read within the
    same bounds as `scan`; None when saved, else why nothing could be (this user may not
    read the log), and `target` is left absent.
    """
    deadline = time.monotonic() + deadline_s
    errors = []
    for argv in commands or (JOURNAL, DMESG):
        reader = _CommandLines(argv, deadline, max_bytes)
        try:
            # safefs places the copy only once it is whole; _Unsaved leaves nothing behind
            with safe_writing(target, mode=0o644, text=True) as out:
                lines = 0
                for line in reader:
                    out.write(line.rstrip("\n") + "\n")
                    lines += 1
                if reader.error is not None or not reader.complete or not lines:
                    raise _Unsaved
            return None
        except _Unsaved:
            errors.append(reader.error or (f"`{' '.join(argv)}` printed nothing" if reader.complete
                                           else f"`{' '.join(argv)}` was cut short"))
    return "; ".join(errors)
