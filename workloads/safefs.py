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

This is the one module that writes files (``tests/test_choke_points.py`` holds
every other to it). A whole file is written by :func:`write_bytes` or through
:func:`writing` (a file object on a new temporary file in the checked directory:
written, ``fsync``-ed, renamed over the name); a library that insists on a file
*name* (Keras's ``model.save``) writes inside :func:`staged`, a private directory
made in the checked one, and the file it leaves is checked and renamed into
place; a file that grows while it is read (the GPU monitor's CSV) is opened by
:func:`open_for_writing`; directories are made by :func:`ensure_directory`, one
component at a time. Whatever entry stands at the name being written is judged
first (:func:`refuse_planted`): a link, a hard link, a fifo or another user's
file there is refused, left as it is, rather than silently replaced.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal, TextIO, overload

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


def ensure_directory(path: Path) -> Path:
    """Make directory ``path`` where missing, as ``mkdir -p`` would, never through a link.

    Every component is walked from ``/``, made where missing (0755) and checked by
    :func:`foreign_writer` before the next is looked up in it
    (:func:`resolve_directory`): no ``mkdir(parents=True)`` runs before the check,
    so a link planted at any component by someone else refuses the path rather
    than creating directories at its target. Returns ``path``.
    """
    os.close(resolve_directory(Path(path), create=True)[0])
    return Path(path)


def refuse_planted(directory: int, path: Path) -> None:
    """Refuse what stands at ``path``'s name in ``directory`` unless it is a file of ours.

    A file written by rename never writes through what was there, but an entry
    nobody of ours put there (a link, a hard link to a file elsewhere, a fifo, a
    device, another user's file) is the sign of someone preparing one: it is
    refused in one line and left for whoever looks, not replaced silently.
    """
    try:
        info = os.stat(Path(path).name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UnsafePath(path, "is a symbolic link", _FIX)
    if stat.S_ISDIR(info.st_mode):
        raise UnsafePath(path, "is a directory", "give a file name, or remove the directory")
    problem = _file_problem(info)
    if problem:
        raise UnsafePath(path, problem, _FIX)


def _new_temporary(directory: int, prefix: str, suffix: str = "") -> tuple[int, str]:
    """A new file (``O_EXCL``, never through a link) of a random name in ``directory``."""
    for _ in range(100):
        name = f"{prefix}{secrets.token_hex(6)}{suffix}"
        try:
            flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            return os.open(name, flags, 0o600, dir_fd=directory), name
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", prefix)


@overload
def writing(path: Path, *, mode: int = ..., text: Literal[False] = ..., newline: str | None = ...,
            dir_fd: int | None = ...) -> contextlib.AbstractContextManager[BinaryIO]: ...
@overload
def writing(path: Path, *, mode: int = ..., text: Literal[True], newline: str | None = ...,
            dir_fd: int | None = ...) -> contextlib.AbstractContextManager[TextIO]: ...
def writing(path: Path, *, mode: int = 0o644, text: bool = False, newline: str | None = None,
            dir_fd: int | None = None) -> contextlib.AbstractContextManager[Any]:
    """A file object whose contents replace ``path`` when the ``with`` block ends cleanly.

    For every writer that can take a file object (``csv.writer``, ``json.dump``,
    matplotlib's ``savefig(fh, format=...)``): the directory is walked, made where
    missing and checked (:func:`parent_fd`), the entry at the name judged
    (:func:`refuse_planted`), and the data go to a new temporary file beside it
    (``O_EXCL``, ``O_NOFOLLOW``, ``w+``: it can be read back, e.g. to hash it). On a
    clean exit the file is flushed, given ``mode``, ``fsync``-ed and renamed over
    the name in that same directory (a reader sees the old file or the new one);
    on an exception it is removed and ``path`` is as it was. With ``dir_fd``, a
    descriptor of ``path``'s directory that the caller has checked by a stricter
    rule (:func:`trusted_directory`), the file is written there.
    """
    return _writing(Path(path), mode, text, newline, dir_fd)


@contextlib.contextmanager
def _writing(path: Path, mode: int, text: bool, newline: str | None,
             dir_fd: int | None) -> Iterator[Any]:
    with (contextlib.nullcontext(dir_fd) if dir_fd is not None
          else parent_fd(path, create=True)) as directory:
        refuse_planted(directory, path)
        fd, tmp = _new_temporary(directory, f".{path.name}.", ".tmp")
        try:
            raw = os.fdopen(fd, "w+b")
            stream: Any = (io.TextIOWrapper(raw, encoding="utf-8", newline=newline)
                           if text else raw)
            with stream:
                yield stream
                stream.flush()
                os.fchmod(raw.fileno(), mode)
                os.fsync(raw.fileno())
            refuse_planted(directory, path)
            os.replace(tmp, path.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=directory)
            raise


def write_bytes(path: Path, data: bytes, mode: int = 0o644, *, dir_fd: int | None = None) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the new one.

    :func:`writing` with the whole contents at hand: never through a link, the
    directory checked, the old entry judged, the new file renamed into place.
    """
    with writing(Path(path), mode=mode, dir_fd=dir_fd) as fh:
        fh.write(data)


def write_text(path: Path, text: str, mode: int = 0o644) -> None:
    """:func:`write_bytes` of ``text`` in UTF-8."""
    write_bytes(path, text.encode(), mode)


@contextlib.contextmanager
def staged(path: Path, *, mode: int = 0o644) -> Iterator[Path]:
    """A name for a library that writes only by file name; what it writes then becomes ``path``.

    Keras's ``model.save(name)`` opens ``name`` itself (and wants it to end in
    ``.keras``). It is given ``<private dir>/<path's name>``: a directory of ours,
    mode 0700, made new inside ``path``'s checked directory and reached through
    its descriptor (``/proc/self/fd/N``), so no one else can plant anything in it
    and no link on the way is looked up again. After the block the file left there
    must be a regular file of ours with one link; it is given ``mode``, ``fsync``-ed
    and renamed over ``path`` (whose old entry was judged by :func:`refuse_planted`).
    The private directory is removed whatever happens.
    """
    path = Path(path)
    with parent_fd(path, create=True) as directory:
        refuse_planted(directory, path)
        private = ""
        for _ in range(100):
            private = f".{path.name}.{secrets.token_hex(6)}.d"
            try:
                os.mkdir(private, 0o700, dir_fd=directory)
                break
            except FileExistsError:
                continue
        inner = os.open(private, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=directory)
        try:
            yield Path(f"/proc/self/fd/{inner}") / path.name
            fd = open_file(path, os.O_RDONLY, dir_fd=inner)
            try:
                os.fchmod(fd, mode)
                os.fsync(fd)
            finally:
                os.close(fd)
            refuse_planted(directory, path)
            os.replace(path.name, path.name, src_dir_fd=inner, dst_dir_fd=directory)
        finally:
            os.close(inner)
            with contextlib.suppress(OSError):
                shutil.rmtree(private, dir_fd=directory)


@contextlib.contextmanager
def scratch(name: str) -> Iterator[Path]:
    """A name in a new private directory (0700, ours), removed afterwards: output no one keeps.

    Under MultiWorkerMirroredStrategy every worker must call Keras's ``model.save``;
    only the chief's copy is kept (:func:`staged`), the others write here.
    """
    with tempfile.TemporaryDirectory(prefix="workloads-scratch-") as private:
        yield Path(private) / Path(name).name


def open_for_writing(path: Path, *, newline: str | None = None) -> TextIO:
    """A text file at ``path``, emptied, for a writer whose readers watch it grow.

    The GPU monitor's CSV must show every finished sample while the benchmark
    runs, so it cannot be a temporary renamed at the end: it is opened in its
    checked directory (made where missing) without following a link and must be a
    regular file of ours with one link (:func:`open_file`), then truncated.
    """
    path = Path(path)
    with parent_fd(path, create=True) as directory:
        fd = open_file(path, os.O_WRONLY | os.O_CREAT, dir_fd=directory)
    try:
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return open(fd, "w", encoding="utf-8", newline=newline)  # the caller closes


def probe_directory(path: Path) -> None:
    """Make ``path``'s directory where missing and show a new file can be created in it.

    For a long run's output, checked before the run rather than after: the
    directory walked and checked (:func:`parent_fd`), a temporary created in it
    and removed at once. Raises :class:`UnsafePath` or ``OSError``.
    """
    with parent_fd(Path(path), create=True) as directory:
        fd, name = _new_temporary(directory, ".probe-")
        os.close(fd)
        os.unlink(name, dir_fd=directory)
