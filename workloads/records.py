"""Result records: one JSON file per run plus an append-only JSON-lines log.

Every workload writes the same envelope (``workload``, ``started_at``, ``env``,
``status``...) so reports, sweeps and scaling studies can read any record
without knowing which command produced it. Files are written atomically (temp
file in the same directory, fsync, rename) so a crash or kill never leaves half
a record behind.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workloads import safefs
from workloads.bounded import (
    LOG_MAX_BYTES,
    RECORD_MAX_BYTES,
    Allowance,
    BadInput,
    NotAFile,
    OverAllowance,
    read_json,
    read_json_lines,
)
from workloads.errors import WorkloadError
from workloads.safefs import UnsafePath, open_file, parent_fd

SCHEMA_VERSION = 1
LOG_NAME = "records.jsonl"


def utc_now() -> str:
    """ISO-8601 timestamp in UTC with seconds precision, e.g. 2026-11-23T03:41:41Z."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_record(workload: str, **fields: Any) -> dict[str, Any]:
    """Start a record: the common envelope first, workload-specific fields after."""
    record: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "workload": workload,
        "started_at": utc_now(),
        "status": "running",
    }
    record.update(fields)
    return record


def ensure_writable(path: Path) -> Path:
    """Fail early, before any expensive work, if ``path`` cannot be written.

    Creates the parent directory (each directory on the way walked and checked,
    :func:`workloads.safefs.parent_fd`) and probes it with a temporary file, so a
    typo'd, read-only or shared output location is reported before a long
    training run, not after.
    """
    path = Path(path).expanduser()
    if path.exists() and path.is_dir():
        raise WorkloadError(
            f"output path {path} is a directory", "give a file name, e.g. --output results/run.json"
        )
    try:
        safefs.probe_directory(path)
    except UnsafePath as exc:
        raise WorkloadError(f"cannot write to {exc.path} ({exc.reason})",
                            "choose a writable --output location") from exc
    except OSError as exc:
        raise WorkloadError(
            f"cannot write to {path.parent} ({exc.strerror or exc})",
            "choose a writable --output location",
        ) from exc
    return path


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``data`` to ``path`` atomically, never through a link (:func:`safefs.write_bytes`)."""
    safefs.write_bytes(path, data, mode)


def to_json(record: Mapping[str, Any]) -> str:
    """Serialise a record; NumPy scalars and paths become plain JSON values."""
    return json.dumps(record, indent=2, sort_keys=False, default=_json_default) + "\n"


def _json_default(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    for attr in ("item", "tolist"):  # NumPy scalars and arrays, without importing NumPy
        if hasattr(value, attr):
            return getattr(value, attr)()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def write_record(record: Mapping[str, Any], path: Path, log: Path | None = None) -> Path:
    """Write ``record`` atomically to ``path``, then append it to the JSON-lines ``log``.

    ``log`` defaults to ``records.jsonl`` beside ``path``. The record file comes
    first: once it is in place nothing measured can be lost, and a full disk can at
    worst cost the log line, which :func:`append_line` then reports in one line.
    """
    path = Path(path)
    try:
        atomic_write_bytes(path, to_json(record).encode())
    except OSError as exc:
        raise WorkloadError(
            f"cannot write the record {path} ({exc.strerror or exc})",
            "free space in (or choose another) --output location and run again",
        ) from exc
    log = Path(log) if log is not None else path.parent / LOG_NAME
    line = json.dumps(record, default=_json_default, separators=(",", ":")) + "\n"
    try:
        append_line(log, line.encode())
    except UnsafePath as exc:
        where = f"{log.name} beside it" if log.parent == path.parent else str(log)
        raise WorkloadError(
            f"the record is safe in {path}, but {where} {exc.reason}",
            "remove it (reports read the record itself)",
        ) from exc
    except OSError as exc:
        raise WorkloadError(
            f"the record is safe in {path}, but appending to {log.name} failed "
            f"({exc.strerror or exc})",
            "free space (reports read the record itself)",
        ) from exc
    return path


def append_line(log: Path, line: bytes) -> None:
    """Append one complete line to ``log``, or leave ``log`` as it was and raise ``OSError``.

    Why not one ``write`` in append mode: a full disk (``ENOSPC``) or a file-size
    limit (``EFBIG``) makes ``write`` short, and the torn line then glues itself to
    the next record, which every reader drops with it. So, under an exclusive
    ``flock`` (concurrent workloads share one log, also on file systems where
    ``O_APPEND`` is not atomic): a torn last line left by an earlier writer is cut
    off, the line is written in a loop until whole, and on failure the file is cut
    back to where it ended.

    The log is opened without following a link and must be a regular file of
    ours with one link (:func:`workloads.safefs.open_file`), in its directory as
    walked and checked from ``/`` (:func:`workloads.safefs.parent_fd`): results
    directories may be shared, and a planted ``records.jsonl`` link, or a link in
    place of a directory above it, would otherwise have another file cut and
    appended to. Such a log raises :class:`UnsafePath`, untouched.
    """
    if not line.endswith(b"\n") or b"\n" in line[:-1]:
        raise ValueError("append_line takes exactly one line ending in a newline")
    with parent_fd(Path(log)) as directory:
        fd = open_file(Path(log), os.O_RDWR | os.O_CREAT, dir_fd=directory)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        end = _repair_torn_tail(fd)
        try:
            written = 0
            while written < len(line):
                written += os.pwrite(fd, line[written:], end + written)
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            raise
    finally:
        os.close(fd)  # closing drops the lock


def _repair_torn_tail(fd: int) -> int:
    """Cut a last line that has no newline (a writer killed mid-line); the new end offset.

    The torn line is never a complete record (that always ends in a newline), and its
    record file holds the whole record, so nothing readable is lost.
    """
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    block = 1 << 16
    end = size
    while end > 0:
        start = max(0, end - block)
        chunk = os.pread(fd, end - start, start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            keep = start + newline + 1
            os.ftruncate(fd, keep)
            return keep
        end = start
    os.ftruncate(fd, 0)
    return 0


def read_record(path: Path) -> dict[str, Any]:
    """Read one record file; a clear error if it is missing or not a record.

    Bounded (:func:`workloads.bounded.read_json`): at most 16 MiB, nesting and
    numbers checked before parsing, every failure one line.
    """
    try:
        data = read_json(Path(path), RECORD_MAX_BYTES)
    except FileNotFoundError as exc:
        raise WorkloadError(f"record {path} does not exist", "check the path") from exc
    except OSError as exc:
        raise WorkloadError(f"cannot read {path} ({exc.strerror or exc})", "check it") from exc
    except BadInput as exc:
        raise WorkloadError(f"{path} {exc}", "regenerate it") from exc
    if not isinstance(data, dict) or "workload" not in data:
        raise WorkloadError(f"{path} is not a workloads record", "point to a run's .json file")
    return data


def read_log(path: Path, allowance: Allowance | None = None) -> list[Any]:
    """Read a JSON-lines log, skipping a torn last line (a writer killed mid-line).

    Bounded (:func:`workloads.bounded.read_json_lines`): a log over 64 MiB or
    1,000,000 values is refused in one line; a line that is not a bounded JSON
    value is skipped.
    """
    try:
        return read_json_lines(Path(path), LOG_MAX_BYTES, allowance)
    except BadInput as exc:
        fix = ("report fewer files at once" if isinstance(exc, OverAllowance)
               else "give the log file itself" if isinstance(exc, NotAFile)
               else "split or trim the log")
        raise WorkloadError(f"{path} {exc}", fix) from exc
    except OSError as exc:
        raise WorkloadError(f"cannot read {path} ({exc.strerror or exc})", "check it") from exc


def default_output(workload: str, stem: str, suffix: str = ".json") -> Path:
    """``results/<workload>-<stem>-<UTC time>.json`` under $WORKLOADS_RESULTS or ./results."""
    base = Path(os.environ.get("WORKLOADS_RESULTS", "results"))
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return base / f"{workload}-{stem}-{stamp}{suffix}"
