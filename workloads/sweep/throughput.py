"""Runs per hour, read back from the database rows alone.

Each row carries its start (``_time_utc``), runtime, invocation (``_run_id``) and
worker count (``_workers``), so the throughput of every invocation of a sweep
(first attempt, resumed remainder, a scaling scan) is derived, not stored twice.
An invocation's wall time runs from its first run's start to its last run's end.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd


@dataclass(frozen=True)
class Throughput:
    run_id: str
    workers: int
    runs: int
    failed: int
    wall_seconds: float

    @property
    def runs_per_hour(self) -> float | None:
        return 3600.0 * self.runs / self.wall_seconds if self.wall_seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "runs_per_hour": self.runs_per_hour}


def by_invocation(df: pd.DataFrame) -> list[Throughput]:
    """One entry per ``_run_id``, oldest first; ``runs`` counts the successful ones."""
    if "_adopted" in df:  # finished while no sweep watched: their timing is not this sweep's
        df = df[~df["_adopted"].map(lambda v: v is True).astype(bool)]
    if df.empty:
        return []
    start = pd.to_datetime(df["_time_utc"]).astype("int64") / 1e9
    end = start + pd.to_numeric(df["_pset_runtime"])
    frame = pd.DataFrame(
        {
            "run_id": df["_run_id"].astype(str),
            "seq": pd.to_numeric(df["_run_seq"]),
            # a database of psweep.run has neither column: one worker, no failures
            "workers": pd.to_numeric(df.get("_workers", pd.Series(1, index=df.index))),
            "failed": df.get("_failed", pd.Series(False, index=df.index)).fillna(False),
            "start": start,
            "end": end,
        }
    )
    out = []
    for run_id, group in sorted(frame.groupby("run_id"), key=lambda item: item[1]["seq"].min()):
        out.append(
            Throughput(
                run_id=str(run_id),
                workers=int(group["workers"].max()),
                runs=int((~group["failed"].astype(bool)).sum()),
                failed=int(group["failed"].astype(bool).sum()),
                wall_seconds=float(group["end"].max() - group["start"].min()),
            )
        )
    return out


def overall(entries: list[Throughput]) -> dict[str, Any]:
    """Total successful runs over total wall time of all invocations."""
    runs = sum(e.runs for e in entries)
    wall = sum(e.wall_seconds for e in entries)
    return {
        "runs": runs,
        "failed": sum(e.failed for e in entries),
        "wall_seconds": wall,
        "runs_per_hour": 3600.0 * runs / wall if wall > 0 else None,
        "invocations": [e.as_dict() for e in entries],
    }
