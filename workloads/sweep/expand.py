"""Turn a spec into the list of parameter sets (psets), with psweep doing the expansion.

Each pset gets psweep's hash (``_pset_hash``: a joblib hash of the parameters) and a
``_pset_id`` derived from that hash. psweep itself draws random ids, which is
right for repeated runs of one pset; a sweep runs each pset once, and a stable id
gives a killed-and-restarted run the same directory and lets a SLURM array task
name its pset by id without a shared plan file.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import psweep as ps

from workloads.sweep.spec import SweepSpec
from workloads.sweep.workload import Value

# Fixed namespace for uuid5(pset hash) -> pset id; never change it (ids would change).
PSET_ID_NAMESPACE = uuid.UUID("6f1d0c2e-5b7a-4c1e-9a53-2b8d4e7f9c10")


@dataclass(frozen=True)
class Pset:
    """One run of the sweep: its parameters and its identity in the database."""

    index: int  # position in the plan, what `--run-one N` and job-array task ids use
    params: dict[str, Value]
    vary: str | None  # the parameter this pset scans (star mode), psweep's `_vary`
    pset_hash: str
    pset_id: str

    def label(self, names: list[str]) -> str:
        """``learning_rate=3.0 style_weight=10.0``: the varied values, for logs."""
        return " ".join(f"{name}={format_value(self.params.get(name))}" for name in names)


def format_value(value: Any) -> str:
    """A value as logs and tables show it: floats to 6 significant digits."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, list):
        return ",".join(format_value(v) for v in value)
    return str(value)


def pset_id_for(pset_hash: str) -> str:
    return str(uuid.uuid5(PSET_ID_NAMESPACE, pset_hash))


def expand(spec: SweepSpec) -> list[Pset]:
    """All psets of the spec in a stable order (star: scan by scan; grid: product order)."""
    center = spec.center
    if spec.mode == "star":
        raw = ps.stargrid(
            const=center,
            vary=[ps.plist(name, values) for name, values in spec.vary.items()],
            vary_labels=list(spec.vary),
            skip_dups=True,  # the centre point appears in every scan: run it once
        )
    else:
        fixed = [ps.plist(name, [value]) for name, value in center.items() if name not in spec.vary]
        raw = ps.pgrid([*fixed, *(ps.plist(name, values) for name, values in spec.vary.items())])
    psets = []
    for index, entry in enumerate(raw):
        vary = entry.pop("_vary", None)
        params = {name: entry[name] for name in spec.workload.options if name in entry}
        digest = ps.pset_hash(params)
        psets.append(Pset(index, params, vary, digest, pset_id_for(digest)))
    return psets


def find(plan: list[Pset], key: str) -> Pset:
    """A pset by id, by hash, or by its index in the plan (job-array task ids)."""
    from workloads.errors import WorkloadError

    for pset in plan:
        if key in (pset.pset_id, pset.pset_hash):
            return pset
    if key.isdigit() and int(key) < len(plan):
        return plan[int(key)]
    raise WorkloadError(
        f"no run {key!r} in this sweep ({len(plan)} runs, indexes 0..{len(plan) - 1})",
        "give a pset id or index from 'workloads sweep SPEC --dry-run'",
    )
