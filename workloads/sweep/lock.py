"""File locks: one sweep per directory, and one writer of the database at a time.

Both use ``flock``, which the kernel drops when the holder dies: a sweep killed
with SIGKILL or lost in a reboot leaves no stale lock to clean up by hand.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
from collections.abc import Iterator
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.records import utc_now

SWEEP_LOCK = ".sweep.lock"
DATABASE_LOCK = ".database.lock"


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``, waiting for it (for short critical sections)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def sweep_lock(directory: Path) -> Iterator[None]:
    """Refuse to start when another sweep runs in ``directory``; hold the lock until done."""
    path = Path(directory) / SWEEP_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            raise WorkloadError(
                f"another sweep ({holder}) is running in {directory}",
                "wait for it to finish, or give this sweep another --dir",
            ) from None
        os.ftruncate(fd, 0)
        info = {"pid": os.getpid(), "host": platform.node(), "started_at": utc_now()}
        os.write(fd, json.dumps(info).encode())
        yield
    finally:
        os.close(fd)


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text())
        return f"pid {info['pid']} on {info['host']}, started {info['started_at']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "holder unknown"
