"""The preload library (bindaddr.c): built and trusted only in a directory that is yours alone.

Why: whatever file LD_PRELOAD names runs as the job's user inside every worker.
A fixed name in a shared cache (``$WORKLOADS_CACHE`` on a group or world-writable
file system) lets anyone who can write there plant one. So the library is never
found by name alone:

* it lives in ``netbind-<uid>`` (mode 0700, owned by this user, not a symbolic
  link) under ``$WORKLOADS_CACHE``, and every directory on the way to it, links
  resolved, must pass the rule the sweep and the records use
  (:func:`workloads.safefs.foreign_writer`: owned by this user or root, writable
  by nobody else unless sticky, like ``/tmp``), so nobody else can rename it away
  and put their own in its place. When that path fails a check,
  ``~/.cache/workloads`` is tried; when both fail, one line says why;
* it is built there from a temporary file (compiled, fsync'ed, renamed), and
  the SHA-256 of the bytes compiled is recorded beside it;
* before each use it is opened without following links, and must be a regular
  file owned by this user, writable by nobody else, whose bytes hash to the
  recorded digest. Anything else there is rebuilt, never loaded;
* after the worker re-executes with it, /proc/self/maps must show it mapped
  (a preload the loader refused would otherwise leave the worker on every
  interface while its record says otherwise).

``$WORKLOADS_BIND_SHIM`` (a library built elsewhere, e.g. mounted into an
Apptainer container) must be a regular file owned by this user or root and
writable by nobody else; its bytes and its directory are the caller's choice.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.safefs import UnsafePath, resolve_directory

SOURCE = Path(__file__).with_name("bindaddr.c")
SHIM_ENV = "WORKLOADS_BIND_SHIM"
MODE_ENV = "WORKLOADS_WORKER_BIND"
DIGEST_SUFFIX = ".sha256"
WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def library_name() -> str:
    """``libbindaddr-<first 16 hex of the source's SHA-256>.so``: one build per source version."""
    return f"libbindaddr-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]}.so"


def cache_candidates() -> list[Path]:
    """Where the private directory may live: under $WORKLOADS_CACHE, else ~/.cache/workloads.

    As given: :func:`private_directory` walks them, links resolved and checked.
    """
    home = Path.home() / ".cache" / "workloads"
    given = os.environ.get("WORKLOADS_CACHE")
    bases = [Path(given), home] if given else [home]
    return [Path(os.path.abspath(base)) / f"netbind-{os.geteuid()}" for base in bases]


def _private_problem(info: os.stat_result, shown: Path) -> str | None:
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return f"{shown} is not a directory (a link or another file)"
    if info.st_uid != os.geteuid():
        return f"{shown} is owned by uid {info.st_uid}, not by you (uid {os.geteuid()})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"{shown} has mode {stat.S_IMODE(info.st_mode):04o}, not 0700"
    return None


def private_directory(directory: Path, *, create: bool = False) -> tuple[Path | None, str | None]:
    """(`directory`'s real path, None), or (None, why it is not this user's private directory).

    Every directory on the way is walked and checked as the sweep's are
    (:func:`workloads.safefs.resolve_directory`, made 0755 where missing with
    ``create``); `directory` itself (made 0700 with ``create``) must be a real
    directory, not a link, owned by the effective uid, with no permission for
    group or others.
    """
    try:
        parent_fd, parent = resolve_directory(directory.parent, create=create)
    except UnsafePath as exc:
        return None, exc.problem
    except OSError as exc:
        return None, f"{directory.parent}: {exc.strerror}"
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory.name, 0o700, dir_fd=parent_fd)
                made = os.open(directory.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW,
                               dir_fd=parent_fd)
                try:
                    os.fchmod(made, 0o700)  # whatever the umask
                finally:
                    os.close(made)
        info = os.stat(directory.name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as exc:
        return None, f"{directory}: {exc.strerror}"
    finally:
        os.close(parent_fd)
    problem = _private_problem(info, directory)
    return (None, problem) if problem else (parent / directory.name, None)


def private_directory_problem(directory: Path) -> str | None:
    """Why `directory` is not your private directory, under safe parents (None: it is)."""
    return private_directory(directory)[1]


def _open_owned(path: Path, owners: set[int]) -> tuple[bytes, os.stat_result] | None:
    """The bytes of `path` if it is a regular file, not a link, owned by `owners`, and
    writable by nobody else; None otherwise (missing included). Checked on the open
    file (fstat), so what is checked is what is read."""
    try:
        fd = os.open(path, _READ_FLAGS)
    except OSError:  # missing, a symbolic link (ELOOP), unreadable
        return None
    info = os.fstat(fd)
    if (not stat.S_ISREG(info.st_mode) or info.st_uid not in owners
            or info.st_mode & WRITABLE_BY_OTHERS):
        os.close(fd)
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(), info


def is_verified(library: Path) -> bool:
    """True when `library` is ours, writable by nobody else, and hashes to its recorded digest."""
    mine = {os.geteuid()}
    found = _open_owned(library, mine)
    recorded = _open_owned(library.with_name(library.name + DIGEST_SUFFIX), mine)
    if found is None or recorded is None:
        return False
    return recorded[0].decode("ascii", "replace").strip() == hashlib.sha256(found[0]).hexdigest()


def _compiler() -> str:
    wanted = os.environ.get("CC")
    compiler = shutil.which(wanted) if wanted else shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise WorkloadError(
            "no C compiler to build the library that binds TensorFlow's workers",
            f"install gcc, set {SHIM_ENV} to a built libbindaddr.so, or {MODE_ENV}=any",
        )
    return compiler


def _write_durably(directory: Path, data: bytes, mode: int) -> Path:
    """`data` in a new temporary file in `directory` (mode `mode`, fsync'ed); its path."""
    fd, name = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Path(name)


def build(directory: Path, library: Path) -> Path:
    """Compile bindaddr.c into `library` in the private `directory`, with its digest beside it.

    The compiler writes a temporary file in the same directory; it is checked,
    made 0755 and fsync'ed through one descriptor, hashed from that descriptor,
    and renamed into place after its digest, so a reader never finds a library
    without its digest. Tasks of one node that build at the same moment each
    rename a complete, identical build.
    """
    compiler = _compiler()
    fd, scratch = tempfile.mkstemp(prefix=".cc-", suffix=".so", dir=directory)
    os.close(fd)
    written = [Path(scratch)]
    try:
        result = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", scratch, str(SOURCE)],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            first = (result.stderr.strip().splitlines() or ["no output"])[0]
            raise WorkloadError(f"building the worker bind library failed ({first})",
                                f"fix the compiler ({compiler}) or set {MODE_ENV}=any")
        fd = os.open(scratch, _READ_FLAGS)
        with os.fdopen(fd, "rb") as compiled:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
                raise WorkloadError(f"the compiler's output {scratch} is not a file of yours",
                                    f"check {directory} and the compiler ({compiler})")
            os.fchmod(fd, 0o755)
            os.fsync(fd)
            data = compiled.read()
        digest = _write_durably(directory, f"{hashlib.sha256(data).hexdigest()}\n".encode(),
                                0o644)
        written.append(digest)
        os.replace(digest, library.with_name(library.name + DIGEST_SUFFIX))
        os.replace(scratch, library)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        for path in written:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return library


def _given_library(given: str) -> Path:
    """$WORKLOADS_BIND_SHIM, resolved, once the file itself passes the owner and mode checks.

    Its directory is not checked: the variable is an explicit choice, and in an
    Apptainer container (run-workloads.sh mounts the host's private build there)
    the image's directories belong to an unmapped uid.
    """
    path = Path(os.path.realpath(given))
    if not path.is_file():
        raise WorkloadError(f"{SHIM_ENV}={given} is not a file",
                            "point it at libbindaddr.so or unset it to build one here")
    if _open_owned(path, {0, os.geteuid()}) is None:
        raise WorkloadError(
            f"{SHIM_ENV}={given} is owned by someone else or writable by others",
            "point it at a copy only you (or root) can write, or unset it to build one",
        )
    return path


def shim_library() -> Path:
    """The verified preload library: $WORKLOADS_BIND_SHIM, or ours, built when needed."""
    given = os.environ.get(SHIM_ENV)
    if given:
        return _given_library(given)
    problems = []
    for candidate in cache_candidates():
        directory, problem = private_directory(candidate, create=True)
        if directory is None:
            problems.append(problem or f"{candidate} cannot be used")
            continue
        library = directory / library_name()
        if not is_verified(library):
            build(directory, library)
        return library
    raise WorkloadError(
        f"no private directory for the worker bind library: {problems[0]}",
        "set WORKLOADS_CACHE to a directory only you can write",
    )


def is_mapped(library: Path) -> bool:
    """True when this process has `library` mapped (the dynamic loader preloaded it).

    A library replaced after it was mapped (another task of the node rebuilt it)
    shows as ``PATH (deleted)``; that is still the file that was verified.
    """
    wanted = {str(library), f"{library} (deleted)"}
    with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
        for line in maps:
            fields = line.rstrip("\n").split(maxsplit=5)
            if len(fields) == 6 and fields[5] in wanted:
                return True
    return False
