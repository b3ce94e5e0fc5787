"""Opening files in directories that may be shared, without writing through anything planted.

Why: ``open(path, O_CREAT)`` follows a symbolic link at ``path``, so whoever may
create entries in a directory decides which file a write lands in: a
``.sweep.lock -> ~victim/.bashrc`` gets overwritten by the victim's sweep, a
``records.jsonl`` link has its target truncated and appended to. Everything here
opens with ``O_NOFOLLOW`` and then checks the opened file itself (``fstat`` on
the descriptor, not the path, so nothing can be swapped in between):

* a file we write must be a regular file, owned by us, with one link (a hard
  link to a file elsewhere is that file);
* a directory we create files in must be ours and writable by nobody else, and
  no directory above it may be writable by everyone without the sticky bit
  (anyone could then move it aside). Files are then opened relative to a
  descriptor of the directory that was checked (``dir_fd``), so a directory
  swapped for a link after the check does not redirect them.

Every refusal is one :class:`UnsafePath` line naming the path and the fix.
Other ``OSError`` (a full disk) pass through unchanged: the callers decide.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from workloads.errors import WorkloadError

_FILE_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# Only to look up names in, and fstat: needs no read permission (a directory above may be 0711).
_PATH_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
DIR_MODE = 0o755  # what the sweep creates: private to writers whatever the umask
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafePath(WorkloadError):
    """A file or directory that could redirect a write: refused, nothing written."""

    def __init__(self, path: Path | str, reason: str, fix: str) -> None:
        self.path = Path(path)
        self.reason = reason
        super().__init__(f"{path} {reason}", fix)


def open_file(path: Path, flags: int, mode: int = 0o644, *, dir_fd: int | None = None) -> int:
    """Open ``path`` to write, never through a link; with ``dir_fd``, its name in that directory.

    ``dir_fd`` is a descriptor of ``path``'s directory (:func:`trusted_directory`,
    :func:`subdirectory`): only the last component is then looked up, in the
    directory that was checked, and ``path`` serves for messages. ``flags`` are
    the usual ``os.O_*`` (no ``O_TRUNC``: that would cut a file before it is
    checked; truncate the returned descriptor instead). The opened file must be
    a regular file of ours with one link, else :class:`UnsafePath`.
    """
    if flags & os.O_TRUNC:
        raise ValueError("open_file takes no O_TRUNC: truncate the checked descriptor")
    shown = Path(path)
    try:
        name = shown.name if dir_fd is not None else shown
        fd = os.open(name, flags | _FILE_FLAGS, mode, dir_fd=dir_fd)
    except OSError as exc:
        refusal = _refusal(exc)
        if refusal is None:
            raise
        raise UnsafePath(shown, refusal, _FIX) from None
    try:
        info = os.fstat(fd)
        problem = _file_problem(info)
        if problem:
            raise UnsafePath(shown, problem, _FIX)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _refusal(exc: OSError) -> str | None:
    """What an ``open`` error says about the entry found there, if it is a refusal."""
    return {
        errno.ELOOP: "is a symbolic link",
        errno.EISDIR: "is a directory",
        errno.ENXIO: "is a socket or a device without a reader",
        errno.ENOTDIR: "has a file where a directory should be",
    }.get(exc.errno or 0)


def _file_problem(info: os.stat_result) -> str | None:
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file (a fifo, device or socket)"
    if info.st_uid != os.geteuid():
        return f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if info.st_nlink != 1:
        return f"has {info.st_nlink} hard links (writing it writes another file)"
    return None


_FIX = "remove it (after checking who put it there) and run again"


def trusted_directory(path: Path) -> int:
    """A descriptor of directory ``path`` after checking that a write in it stays there.

    The directory must be ours and writable by nobody else (group and others may
    not write it, sticky or not: they could plant entries); every directory above
    it, as the kernel reached it, must not be writable by everyone unless sticky.
    Links in ``path`` are followed as the caller named them; what they lead to is
    what gets checked, and the descriptor holds on to it.
    """
    path = Path(path)
    try:
        fd = os.open(path, _PATH_FLAGS)
    except FileNotFoundError:
        raise UnsafePath(f"directory {path}", "does not exist", "check the path") from None
    except NotADirectoryError:
        raise UnsafePath(path, "is not a directory", "give a directory") from None
    try:
        _check_own_directory(os.fstat(fd), path)
        _check_parents(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def directory_fd(path: Path) -> Iterator[int]:
    """:func:`trusted_directory` as a context manager that closes the descriptor."""
    fd = trusted_directory(path)
    try:
        yield fd
    finally:
        os.close(fd)


def _check_own_directory(info: os.stat_result, path: Path) -> None:
    if info.st_uid != os.geteuid():
        raise UnsafePath(
            f"directory {path}",
            f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()}), "
            "who could plant links in it",
            "use a directory of your own",
        )
    if info.st_mode & _OTHERS_WRITE:
        who = "others" if info.st_mode & stat.S_IWOTH else "its group"
        raise UnsafePath(
            f"directory {path}",
            f"is writable by {who} (mode {stat.S_IMODE(info.st_mode):o}), "
            "who could plant links in it",
            "run 'chmod go-w' on it if you trust its contents, or use another directory",
        )


def _check_parents(fd: int, path: Path) -> None:
    """Walk ``..`` from the opened directory to ``/``: none may be world-writable unsticky."""
    current = os.dup(fd)
    try:
        seen = os.fstat(current)
        while True:
            parent = os.open("..", _PATH_FLAGS, dir_fd=current)
            os.close(current)
            current = parent
            info = os.fstat(current)
            if (info.st_dev, info.st_ino) == (seen.st_dev, seen.st_ino):
                return  # '/' is its own parent
            if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
                above = _name_of(current)
                raise UnsafePath(
                    above,
                    f"(above {path.name}) is writable by everyone and not sticky: "
                    "anyone could move what is in it",
                    "run 'chmod +t' (or 'chmod o-w') on it, or use a directory elsewhere",
                )
            seen = info
    finally:
        os.close(current)


def _name_of(fd: int) -> str:
    """The path the kernel knows for a directory descriptor (for messages only)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "a directory"


def subdirectory(parent_fd: int, name: str, shown: Path, *, create: bool = True) -> int:
    """A descriptor of directory ``name`` inside the checked ``parent_fd``, created if missing.

    It is created with mode 0755 (whatever the umask), opened without following a
    link, and must be ours. One that group or others may write (left by an older
    version under umask 002) is tightened rather than refused: we made it, and
    what is in it is ours to check or clear.
    """
    created = False
    if create:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
            created = True
    try:
        fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        link = stat.S_ISLNK(os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode)
        refusal = "is a symbolic link" if link else "is not a directory"
        raise UnsafePath(shown, refusal, _FIX) from None
    try:
        info = os.fstat(fd)
        if info.st_uid != os.geteuid():
            raise UnsafePath(
                f"directory {shown}",
                f"is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})",
                _FIX,
            )
        if created and stat.S_IMODE(info.st_mode) != DIR_MODE:
            os.fchmod(fd, DIR_MODE)  # the umask decides nothing: 0755, as the README says
        elif info.st_mode & _OTHERS_WRITE:
            os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~_OTHERS_WRITE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def make_directory(path: Path) -> None:
    """Create directory ``path`` (mode 0755 whatever the umask; parents as ``mkdir -p``).

    The new directory is created and checked through a descriptor of its parent,
    never through a link. Call it for a directory that is not there; an existing
    one is for :func:`trusted_directory` to judge.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    parent = os.open(path.parent, _PATH_FLAGS)
    try:
        os.close(subdirectory(parent, path.name, path))
    finally:
        os.close(parent)
