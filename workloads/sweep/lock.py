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

from workloads.bounded import loads_json
from workloads.errors import WorkloadError, brief, clip
from workloads.records import utc_now
from workloads.safefs import directory_fd, open_file, subdirectory

SWEEP_LOCK = ".sweep.lock"
DATABASE_LOCK = ".database.lock"
RUN_LOCK = ".run.lock"  # in each run directory: held by the process running it


class RunBusy(WorkloadError):
    """Another process (a requeued array task, a second submission) holds the run's claim."""


@contextlib.contextmanager
def exclusive(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path``, waiting for it (for short critical sections).

    ``path``'s directory is checked first and the file opened without following a
    link (:mod:`workloads.safefs`): a planted lock file is refused, never written.
    """
    path = Path(path)
    with directory_fd(path.parent) as parent:
        fd = open_file(path, os.O_RDWR | os.O_CREAT, dir_fd=parent)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


@contextlib.contextmanager
def sweep_lock(directory: Path) -> Iterator[None]:
    """Refuse to start when another sweep runs in ``directory``; hold the lock until done.

    The directory's trust is checked before the lock file is opened in it
    (:func:`workloads.safefs.trusted_directory`), and the lock file must be a
    regular file of ours: a ``.sweep.lock`` link planted in a shared directory
    is refused instead of overwriting what it points to.
    """
    path = Path(directory) / SWEEP_LOCK
    with directory_fd(directory) as parent:
        fd = open_file(path, os.O_RDWR | os.O_CREAT, dir_fd=parent)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise WorkloadError(
                f"another sweep ({_holder(fd)}) is running in {directory}",
                "wait for it to finish, or give this sweep another --dir",
            ) from None
        try:
            _write_holder(fd)
        except OSError as exc:  # a full disk at the very start: one line, nothing started
            raise WorkloadError(
                f"cannot write {path} ({exc.strerror or exc})",
                "free space (or fix the disk) and run the sweep again",
            ) from exc
        yield
    finally:
        os.close(fd)


def _write_holder(fd: int) -> None:
    """Who holds the lock, for the next process's message: pid, host, start time."""
    info = {"pid": os.getpid(), "host": platform.node(), "started_at": utc_now()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(info).encode(), 0)


def _holder(fd: int) -> str:
    """The holder a lock file names, read from the descriptor already checked."""
    try:
        info = loads_json(os.pread(fd, 4096, 0))
        return (f"pid {brief(info['pid'])} on {clip(str(info['host']), 40)}, "
                f"started {clip(str(info['started_at']), 25)}")
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

    The sweep directory is checked, the run directory created or opened in it
    without following a link, and the lock file opened in that
    (:mod:`workloads.safefs`): a planted link or foreign file is refused, as
    :class:`~workloads.safefs.UnsafePath`. A full disk raises ``OSError``.
    """
    fd, run = open_claim(directory)
    os.close(run)
    return fd


def open_claim(directory: Path) -> tuple[int, int]:
    """:func:`claim_run`, also returning a descriptor of the run directory it checked.

    The caller clears and writes the run directory through that descriptor, so
    every file of the run's start lands in the directory that was checked.
    """
    directory = Path(directory)
    with directory_fd(directory.parent) as parent:
        run = subdirectory(parent, directory.name, directory)
    try:
        fd = _lock_run(directory, run)
    except BaseException:
        os.close(run)
        raise
    return fd, run


def _lock_run(directory: Path, run: int) -> int:
    fd = open_file(directory / RUN_LOCK, os.O_RDWR | os.O_CREAT, dir_fd=run)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        os.close(fd)
        raise RunBusy(
            f"run {directory.name} is still live in another process ({holder})",
            "let it finish, or stop that process first",
        ) from None
    try:
        _write_holder(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd
