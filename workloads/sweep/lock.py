"""File locks: one sweep per directory, one writer of the database, one process per run.

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
RUN_LOCK = ".run.lock"  # in each run directory: held by the process running it


class RunBusy(WorkloadError):
    """Another process (a requeued array task, a second submission) holds the run's claim."""


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


def claim_run(directory: Path) -> int:
    """Claim a run directory for this process: the locked fd of ``<directory>/.run.lock``.

    Why: an array task that SLURM requeues, or an array submitted twice by hand,
    can start a run whose earlier attempt still lives (a node that lost contact,
    a task being cancelled). Clearing or reusing the directory then would delete
    or mix that run's files. The claim is taken before anything in the directory
    is touched; the caller keeps the fd open for the run's whole life (and hands
    it to the run process), and the kernel drops it when both have exited.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RUN_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunBusy(
            f"run {directory.name} is still live in another process ({_holder(path)})",
            "leave it to finish (its row lands in the database), or stop that process first",
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    info = {"pid": os.getpid(), "host": platform.node(), "started_at": utc_now()}
    os.pwrite(fd, json.dumps(info).encode(), 0)
    return fd
