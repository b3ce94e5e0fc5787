"""The sweep's psweep database: ``<dir>/database.pk``, one row per finished or failed run.

The file is psweep's own format (a pickled pandas DataFrame of dtype object, read
with ``psweep.df_read``), so psweep's tools and any pandas user can open it. What
differs from ``psweep.run``: a row is added the moment its run ends, under a file
lock (several SLURM array tasks may finish at once), and the file is replaced
atomically, so a kill at any instant leaves the previous complete database.

Reading a pickle runs whatever it names, so the database is trusted input: it is
read only when it and its sweep directory are owned by the user running the
command and writable by nobody else (:func:`check_trusted`). Anyone who may
replace ``database.pk`` could otherwise run code as whoever next resumes or
reports the sweep.

Trusted is not the same as well-formed (a disk error, a copy cut short, another
tool's file), so reading is bounded too: a file over :data:`DATABASE_MAX_BYTES` is
refused from ``fstat``, and its opcodes are walked (:mod:`workloads.pickle_walk`)
before ``pickle.loads``: memo indices beyond the stream's stores and MARKs nested
past :data:`DATABASE_LIMITS` are refused before the unpickler allocates for them.
The walk costs time linear in the file (about 30 ms for a 226-run study), and the
unpickler then memory linear in it; what pandas builds from the stream is the
reason the file must be trusted.
"""

from __future__ import annotations

import os
import pickle
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import psweep as ps

from workloads.bounded import BadInput, open_untrusted, read_at_most
from workloads.errors import WorkloadError
from workloads.pickle_walk import PickleLimits, UnsafePickle, check_pickle
from workloads.records import atomic_write_bytes
from workloads.safefs import UnsafePath, directory_fd
from workloads.sweep.lock import DATABASE_LOCK, exclusive

DATABASE = "database.pk"
# A row is a few kB pickled (a 226-run study: 0.5 MB); 256 MiB is a hundred thousand runs.
DATABASE_MAX_BYTES = 256 << 20
DATABASE_LIMITS = PickleLimits(opcodes=DATABASE_MAX_BYTES, depth=256)
SPEC_COPY = "sweep.yaml"  # the spec as last run, normalised: the report reads its axes


class DatabaseWriteError(WorkloadError):
    """Adding a row failed (``ENOSPC``, ``EIO``...): the database is as it was before.

    A ``WorkloadError`` (one line, exit 2) wherever nobody catches it; the sweep loop
    catches it to keep the row and try again while its other runs go on.
    """

    def __init__(self, path: Path, exc: OSError | UnsafePath) -> None:
        self.reason = exc.problem if isinstance(exc, UnsafePath) else exc.strerror or str(exc)
        super().__init__(
            f"cannot write {path} ({self.reason}); finished runs keep their records",
            "free space (or fix the disk) and run the sweep again: it adopts them",
        )


def check_trusted(path: Path) -> None:
    """Refuse ``path`` unless this user owns it and neither group nor others may write it.

    ``os.stat`` follows symbolic links on purpose: what counts is the file or
    directory that would be read. Called before every read of the database (whose
    file is then checked again on the descriptor it is read from).
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    _refuse_untrusted(info, path)


def _refuse_untrusted(info: os.stat_result, path: Path) -> None:
    kind = "sweep directory" if stat.S_ISDIR(info.st_mode) else "sweep database"
    if info.st_uid != os.geteuid():
        raise WorkloadError(
            f"{kind} {path} is owned by uid {info.st_uid}, not by you: its pickle could run "
            "their code",
            "copy it to a directory of yours, or run as its owner",
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        who = "others" if info.st_mode & stat.S_IWOTH else "its group"
        raise WorkloadError(
            f"{kind} {path} is writable by {who} (mode {stat.S_IMODE(info.st_mode):o}): "
            "they could run code through its pickle",
            "run 'chmod go-w' on it if you trust it",
        )


def _load(path: Path) -> pd.DataFrame | None:
    """psweep's ``df_read``, from a descriptor checked to be a trusted regular file.

    Opened without following a link (the sweep never makes one: it replaces the
    file by rename), so what is checked is what is unpickled. ``None`` when absent.
    """
    try:
        fd = open_untrusted(path)  # no link followed, never blocks, regular files only
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise WorkloadError(f"sweep database {path} is not a regular file (a directory)",
                            "move it aside and run again") from None
    except BadInput as exc:
        raise WorkloadError(f"sweep database {path} {exc}",
                            "replace it with the file itself, or move it aside") from None
    try:
        info = os.fstat(fd)
        _refuse_untrusted(info, path)
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > DATABASE_MAX_BYTES:
            raise WorkloadError(
                f"sweep database {path} is {info.st_size} bytes, over the {DATABASE_MAX_BYTES}"
                " read", "move it aside: the next sweep adopts the runs from their records")
        try:
            data = read_at_most(fh, DATABASE_MAX_BYTES)  # never allocates the cap up front
        except BadInput as exc:
            raise WorkloadError(f"sweep database {path} {exc}", "move it aside") from None
        try:
            check_pickle(data, DATABASE_LIMITS)
        except UnsafePickle as exc:
            raise WorkloadError(f"sweep database {path} {exc}",
                                "move it aside: the next sweep adopts the runs from their records",
                                ) from None
        try:
            df = pickle.loads(data)
        except Exception as exc:  # whatever a broken pickle raises: one line, not a traceback
            raise WorkloadError(
                f"sweep database {path} is not a psweep database ({type(exc).__name__})",
                "move it aside: the next sweep adopts the runs from their records",
            ) from None
    if not isinstance(df, pd.DataFrame):
        raise WorkloadError(
            f"sweep database {path} holds a {type(df).__name__}, not a DataFrame",
            "move it aside: the next sweep adopts the runs from their records",
        )
    return df


class SweepDatabase:
    """Read and extend the database of one sweep directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DATABASE
        self._lock = self.directory / DATABASE_LOCK

    def read(self) -> pd.DataFrame:
        """The whole database; an empty frame before the first run has ended.

        The directory and the file are checked first (:func:`check_trusted`), and
        then the directory by the rule ``sweep --dir`` applies
        (:func:`workloads.safefs.trusted_directory`: every directory above it walked
        and judged too), so ``workloads report`` reads no database from a directory
        the sweep refuses.
        """
        check_trusted(self.directory)
        with directory_fd(self.directory):
            pass
        df = _load(self.path)
        return pd.DataFrame(dtype=object) if df is None else df

    def status_by_hash(self) -> dict[str, bool]:
        """``{pset hash: failed?}`` for every run in the database."""
        df = self.read()
        if df.empty:
            return {}
        return {str(h): bool(f) for h, f in zip(df["_pset_hash"], df["_failed"], strict=True)}

    def next_run_seq(self) -> int:
        """psweep's ``_run_seq`` for a new invocation: one more than the last."""
        df = self.read()
        return 0 if df.empty else int(pd.to_numeric(df["_run_seq"]).max()) + 1

    def add(self, row: Mapping[str, Any]) -> None:
        """Add one run's row (replacing an earlier row of the same pset) and save at once.

        An ``OSError`` (a full disk, an I/O error) becomes :class:`DatabaseWriteError`;
        the file on disk is then the previous complete database.
        """
        try:
            self._add(row)
        except (OSError, UnsafePath) as exc:
            raise DatabaseWriteError(self.path, exc) from exc

    def check_writable(self) -> None:
        """Open (creating) the lock beside the database once, before any run starts.

        A planted ``.database.lock`` is then refused at the start, in one line,
        rather than at the first row.
        """
        with exclusive(self._lock):
            pass

    def _add(self, row: Mapping[str, Any]) -> None:
        with exclusive(self._lock):
            df = self.read()
            new = dict(row)
            if df.empty:
                new["_pset_seq"] = 0
                df = pd.DataFrame([new], dtype=object)
            else:
                new["_pset_seq"] = int(pd.to_numeric(df["_pset_seq"]).max()) + 1
                df = df[df["_pset_hash"] != new["_pset_hash"]]
                df = pd.concat(
                    [df, pd.DataFrame([new], dtype=object)], sort=False, ignore_index=True
                )
            self._write(ps.df_ensure_dtypes(df, fill_value=ps.FILL_VALUE))

    def _write(self, df: pd.DataFrame) -> None:
        # The bytes psweep.df_write writes (pickle.dump of the frame), but atomically.
        atomic_write_bytes(self.path, pickle.dumps(df))
