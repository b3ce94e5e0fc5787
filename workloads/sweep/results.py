"""A sweep's results arranged for browsing: runs placed on the axes of the varied parameters.

Both the contact sheet and the HTML explorer ask the same two questions: which
values does each varied parameter take (the columns, the slider stops), and
which run sits at a given point. The answers come from the saved spec
(``sweep.yaml``: varied parameters in the user's order, the star's centre) and
the database; a database written by plain psweep, without the spec, still works:
the varied parameters are then the columns with more than one value.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import psweep as ps

from workloads.bounded import BadInput, read_json, read_yaml
from workloads.errors import WorkloadError
from workloads.sweep.database import DATABASE, SPEC_COPY, SweepDatabase

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass
class Run:
    """One row of the database, as the report needs it."""

    pset_id: str
    params: dict[str, Any]
    failed: bool
    failure: str | None
    error: str | None
    runtime: float | None
    results: dict[str, Any]
    image: Path | None
    record: Path | None

    def history(self) -> dict[str, list[float | None]]:
        """The loss history from the run's record: ``{term: [value per iteration]}``."""
        if self.record is None:
            return {}
        try:
            data = read_json(self.record)
        except (OSError, BadInput):
            return {}
        if not isinstance(data, dict):
            return {}
        history = data.get("loss_history")
        if isinstance(history, dict):
            return {str(k): v for k, v in history.items() if isinstance(v, list)}
        if isinstance(history, list):
            return {"total": history}
        return {}


@dataclass
class SweepView:
    """The runs of one sweep and the axes they lie on."""

    directory: Path
    workload: str
    mode: str
    varied: list[str]
    values: dict[str, list[Any]]
    center: dict[str, Any]
    runs: list[Run]
    frame: pd.DataFrame
    others: int = 0  # rows of earlier specs (other fixed values), kept in the CSV only
    _index: dict[str, Run] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self._index = {self._key(run.params): run for run in self.runs}

    def _key(self, params: dict[str, Any]) -> str:
        return json.dumps([params.get(name) for name in self.varied], default=str)

    def at(self, point: dict[str, Any]) -> Run | None:
        """The run whose varied parameters equal ``point``, if it exists."""
        return self._index.get(self._key(point))

    def scan(self, name: str) -> list[tuple[Any, Run | None]]:
        """``name``'s values with the run at each, all other parameters at the centre."""
        return [(value, self.at({**self.center, name: value})) for value in self.values[name]]

    def position(self, run: Run) -> dict[str, int]:
        """Index of each varied value of ``run`` on its axis (slider stops)."""
        return {name: self.values[name].index(run.params.get(name)) for name in self.varied}


def load_sweep(directory: Path) -> SweepView:
    """Read ``directory``'s database and saved spec; a clear error when there is none."""
    directory = Path(directory)
    if not (directory / DATABASE).is_file():
        raise WorkloadError(
            f"{directory} has no {DATABASE}",
            "give the directory of a sweep (see 'workloads sweep --help')",
        )
    frame = SweepDatabase(directory).read()
    if frame.empty:
        raise WorkloadError(
            f"{directory / DATABASE} holds no runs yet", "let the sweep finish a run first"
        )
    spec = _read_spec(directory)
    params = list(ps.filter_cols(frame.columns, kind="pset"))
    records = [_plain(row) for row in frame.to_dict("records")]
    if spec:
        varied = [name for name in spec["vary"] if name in params]
        fixed = {k: v for k, v in spec["center"].items() if k not in varied and k in params}
        current = [row for row in records if all(row.get(k) == v for k, v in fixed.items())]
    else:
        varied = [name for name in params if len({_hashable(r.get(name)) for r in records}) > 1]
        current = records
    values = {name: _axis(name, spec, current) for name in varied}
    if spec:
        center = {name: spec["center"].get(name, values[name][0]) for name in varied}
    else:
        center = {name: _most_common(name, current) for name in varied}
    runs = [_run(directory, row, params) for row in current]
    workload = str(spec.get("workload") if spec else records[0].get("_workload", "unknown"))
    mode = str(spec.get("mode", "star") if spec else "grid")
    return SweepView(directory, workload, mode, varied, values, center, runs, frame,
                     others=len(records) - len(current))


def _read_spec(directory: Path) -> dict[str, Any] | None:
    path = directory / SPEC_COPY
    if not path.is_file():
        return None
    try:
        data = read_yaml(path)
    except BadInput as exc:
        raise WorkloadError(f"{path} {exc}", "delete it: the next sweep writes it again") from exc
    return data if isinstance(data, dict) and "vary" in data and "center" in data else None


def _plain(row: dict[str, Any]) -> dict[str, Any]:
    """Database NA -> None, so rows compare and serialise simply."""
    return {k: (None if _is_na(v) else v) for k, v in row.items()}


def _is_na(value: Any) -> bool:
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # lists: not NA
        return False


def _hashable(value: Any) -> str:
    return json.dumps(value, default=str)


def _axis(name: str, spec: dict[str, Any] | None, rows: list[dict[str, Any]]) -> list[Any]:
    """Every value of ``name``: the spec's, the centre, and any only the database has.

    Numbers (and lists of numbers) are sorted, so a slider moves monotonically;
    other values keep the spec's order with database-only values after them.
    """
    candidates = list(spec["vary"][name]) if spec else []
    if spec and name in spec["center"]:
        candidates.append(spec["center"][name])
    candidates += [r.get(name) for r in rows]
    unique: list[Any] = []
    for value in candidates:
        if value not in unique:
            unique.append(value)
    if all(_sortable(v) for v in unique):
        unique.sort()
    return unique


def _sortable(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number or (isinstance(value, list) and all(_sortable(v) for v in value))


def _most_common(name: str, rows: list[dict[str, Any]]) -> Any:
    counts = Counter(_hashable(r.get(name)) for r in rows)
    best = counts.most_common(1)[0][0]
    return next(r.get(name) for r in rows if _hashable(r.get(name)) == best)


def _run(directory: Path, row: dict[str, Any], params: list[str]) -> Run:
    output = row.get("_output")
    image = directory / output if output and str(output).lower().endswith(IMAGE_SUFFIXES) else None
    record = directory / row["_record"] if row.get("_record") else None
    return Run(
        pset_id=str(row["_pset_id"]),
        params={name: row.get(name) for name in params},
        failed=bool(row.get("_failed")),
        failure=row.get("_failure"),
        error=row.get("_exc_txt"),
        runtime=row.get("_pset_runtime"),
        results={k: v for k, v in row.items() if k.endswith("_") and not k.startswith("_")},
        image=image if image is not None and image.is_file() else None,
        record=record if record is not None and record.is_file() else None,
    )
