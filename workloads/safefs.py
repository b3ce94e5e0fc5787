"""Opening files in directories that may be shared, without writing through anything planted.

Why: ``open(path, O_CREAT)`` follows a symbolic link at ``path``, so whoever may
create entries in a directory decides which file a write lands in: a
``.sweep.lock -> ~victim/.bashrc`` gets overwritten by the victim's sweep, a
``records.jsonl`` link has its target truncated and appended to. Everything here
opens with ``O_NOFOLLOW`` and then checks the opened file itself (``fstat`` on
the descriptor, not the path, so nothing can be swapped in between):

* a file we write must be a regular file, owned by us, with one link (a hard
  link to a file elsewhere is that file);
* every directory a path passes through, links resolved, is judged by one rule
  (:func:`foreign_writer`, shared with the worker bind library): owned by root
  or by you, and writable by neither group nor others unless sticky; anyone else
  who could write one could move what is in it aside and put a link there. The
  path is walked from ``/`` one component at a time (:func:`resolve_directory`),
  each opened ``O_NOFOLLOW`` relative to the one before and checked on its
  descriptor; a link is followed only from a directory that passed, and only
  when it is root's or yours, and its target is walked the same way;
* a directory the sweep creates files in must moreover be ours and writable by
  nobody else. Files are then opened relative to a descriptor of the directory
  that was checked (``dir_fd``), so a directory swapped for a link after the
  check does not redirect them.

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


def foreign_writer(info: os.stat_result) -> str | None:
    """The one rule for every directory a path passes through: who else could change it.

    Owned by root or by you, and writable by neither group nor others unless
    sticky (there only an entry's owner may rename or remove it). The sweep,
    the records and the worker bind library all judge their directories by it.
    ``None`` when nobody else can; else why, as the end of a sentence.
    """
    if info.st_uid not in (0, os.geteuid()):
        return f"is owned by uid {info.st_uid}, not by you or root"
    mode = stat.S_IMODE(info.st_mode)
    if info.st_mode & _OTHERS_WRITE and not (stat.S_ISDIR(info.st_mode) and mode & stat.S_ISVTX):
        who = "all" if info.st_mode & stat.S_IWOTH else "its group"
        return f"is writable by {who} (mode {mode:o}, not sticky)"
    return None


def _own_directory_problem(info: os.stat_result) -> str | None:
    """The rule for a directory files are created in by name: yours, writable by you alone."""
    if info.st_uid != os.geteuid():
        return f"is owned by uid {info.st_uid}, not by you"
    if info.st_mode & _OTHERS_WRITE:
        who = "others" if info.st_mode & stat.S_IWOTH else "its group"
        return f"is writable by {who} (mode {stat.S_IMODE(info.st_mode):o})"
    return None


_LINKS_MAX = 40  # as the kernel's path walk: a loop of links ends here


def resolve_directory(path: Path, *, create: bool = False, own: bool = False) -> tuple[int, Path]:
    """Walk ``path`` from ``/`` one component at a time; a descriptor of it and its real path.

    Each component is opened relative to the directory before it with
    ``O_NOFOLLOW`` and checked on that descriptor (:func:`foreign_writer`), so
    what is checked is what the next step opens, and a link swapped in later is
    not followed. A symbolic link met on the way is followed only when the
    directory holding it passed the check and the link is root's or yours; its
    target is walked the same way, so every directory of the resolved path is
    checked, and so is every directory a link sits in. With ``create``, missing
    components are made (mode 0755 whatever the umask); with ``own``, the last
    one must also be yours and writable by nobody else (:func:`trusted_directory`).
    A refusal is one :class:`UnsafePath` line naming the directory.
    """
    given = Path(path)
    absolute = given if given.is_absolute() else Path(os.getcwd()) / given
    pending = list(reversed(absolute.parts[1:]))  # a stack: the next component last
    chain: list[tuple[int, str]] = [(os.open("/", _PATH_FLAGS), "/")]
    links = 0
    try:
        _check(chain[0][0], "/", own=own and not pending)
        while pending:
            name = pending.pop()
            if name in ("", "."):
                continue
            if name == "..":
                if len(chain) > 1:
                    os.close(chain.pop()[0])
                continue
            parent_fd, parent = chain[-1]
            here = str(Path(parent) / name)
            fd = _open_component(parent_fd, name, here, create=create)
            info = os.fstat(fd)
            if stat.S_ISLNK(info.st_mode):
                os.close(fd)
                links += 1
                if links > _LINKS_MAX:
                    raise UnsafePath(here, "leads through more than 40 links (a loop)", _CHECK)
                if info.st_uid not in (0, os.geteuid()):
                    raise UnsafePath(here, f"is a symbolic link of uid {info.st_uid}",
                                     "replace it with the directory it stands for")
                target = os.readlink(name, dir_fd=parent_fd)
                if target.startswith("/"):
                    while len(chain) > 1:
                        os.close(chain.pop()[0])
                pending.extend(reversed(Path(target).parts[1:] if target.startswith("/")
                                        else Path(target).parts))
                continue
            chain.append((fd, here))
            if not stat.S_ISDIR(info.st_mode):
                raise UnsafePath(here, "is not a directory", "give a directory")
            _check(fd, here, own=own and not pending, info=info)
        fd = os.dup(chain[-1][0])
        return fd, Path(chain[-1][1])
    finally:
        for each, _ in chain:
            os.close(each)


def _open_component(parent_fd: int, name: str, here: str, *, create: bool) -> int:
    """``name`` in the checked ``parent_fd``, not followed if a link; made if asked and missing."""
    try:
        return os.open(name, _PATH_FLAGS & ~os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        if not create:
            raise UnsafePath(f"directory {here}", "does not exist", "check the path") from None
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, DIR_MODE, dir_fd=parent_fd)
        made = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
        try:
            os.fchmod(made, DIR_MODE)  # the umask decides nothing: 0755, as the README says
        finally:
            os.close(made)
    return os.open(name, _PATH_FLAGS & ~os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)


_CHECK = "check who made it, then fix it or use another directory"


def _check(fd: int, here: str, *, own: bool, info: os.stat_result | None = None) -> None:
    info = os.fstat(fd) if info is None else info
    problem = _own_directory_problem(info) if own else foreign_writer(info)
    if problem is None:
        return
    if "owned by" in problem:
        fix = "use a directory of your own" if own else "use one only you and root can write"
    elif own:
        fix = "run 'chmod go-w' on it if you trust it, or use another directory"
    else:
        fix = "run 'chmod +t' or 'chmod go-w' on it, or use another directory"
    raise UnsafePath(here, problem, fix)


def trusted_directory(path: Path) -> int:
    """A descriptor of directory ``path`` after checking that a write in it stays there.

    The directory must be ours and writable by nobody else (group and others may
    not write it, sticky or not: they could plant entries); every directory on
    the way to it, links resolved, must pass :func:`foreign_writer`
    (:func:`resolve_directory`). The descriptor holds on to what was checked.
    """
    return resolve_directory(path, own=True)[0]


@contextlib.contextmanager
def directory_fd(path: Path) -> Iterator[int]:
    """:func:`trusted_directory` as a context manager that closes the descriptor."""
    fd = trusted_directory(path)
    try:
        yield fd
    finally:
        os.close(fd)


@contextlib.contextmanager
def parent_fd(path: Path, *, create: bool = False) -> Iterator[int]:
    """A descriptor of ``path``'s directory, walked and checked (:func:`resolve_directory`).

    For files written in a directory that need not be yours (a results directory
    under ``/tmp``): each directory on the way passes :func:`foreign_writer`, and the
    file itself is then opened in it by name (:func:`open_file` with ``dir_fd``).
    """
    fd, _ = resolve_directory(Path(path).parent, create=create)
    try:
        yield fd
    finally:
        os.close(fd)


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

    Every component is walked, made where missing and checked as
    :func:`resolve_directory` does; the last must then be ours alone.
    """
    os.close(resolve_directory(Path(path), create=True, own=True)[0])
