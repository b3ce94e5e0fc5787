"""The sweep's psweep database: ``<dir>/database.pk``, one row per finished or failed run.

The file is psweep's own format (a pickled pandas DataFrame of dtype object, read
with ``psweep.df_read``), so psweep's tools and any pandas user can open it. What
differs from ``psweep.run``: a row is added the moment its run ends, under a file
lock (several SLURM array tasks may finish at once), and the file is replaced
atomically, so a kill at any instant leaves the previous complete database.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import psweep as ps

from workloads.records import atomic_write_bytes
from workloads.sweep.lock import DATABASE_LOCK, exclusive

DATABASE = "database.pk"
SPEC_COPY = "sweep.yaml"  # the spec as last run, normalised: the report reads its axes


class SweepDatabase:
    """Read and extend the database of one sweep directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / DATABASE
        self._lock = self.directory / DATABASE_LOCK

    def read(self) -> pd.DataFrame:
        """The whole database; an empty frame before the first run has ended."""
        if not self.path.exists():
            return pd.DataFrame(dtype=object)
        return ps.df_read(str(self.path))

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
        """Add one run's row (replacing an earlier row of the same pset) and save at once."""
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
