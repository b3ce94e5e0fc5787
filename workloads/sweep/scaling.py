"""``--workers-scan 1,2,4``: the sweep's throughput with 1..N workers, and the speedup.

Seed 000 claimed the sweep scales linearly in GPUs. This measures it: the same
first ``--scan-runs`` psets of the spec, run from scratch with each worker count
(the first N slots, which span N devices), each in its own psweep directory
under ``<dir>/scaling/``. Runs/hour and the speedup over the first count go to
the terminal and to ``<dir>/scaling.json``, which ``workloads report`` shows.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path
from typing import Any

import psweep as ps
from rich.table import Table

from workloads.errors import WorkloadError
from workloads.records import atomic_write_bytes, utc_now
from workloads.safefs import directory_fd, subdirectory
from workloads.sweep.database import SweepDatabase
from workloads.sweep.expand import Pset
from workloads.sweep.lock import sweep_lock
from workloads.sweep.progress import SweepProgress, console
from workloads.sweep.runner import RunContext
from workloads.sweep.scheduler import execute
from workloads.sweep.session import save_spec
from workloads.sweep.slots import Slot, describe
from workloads.sweep.spec import SweepSpec
from workloads.sweep.throughput import by_invocation

SCALING_JSON = "scaling.json"


def parse_counts(text: str, slots: int, scan_runs: int | None, plan_size: int) -> list[int]:
    """``1,2,4`` -> [1, 2, 4], checked against the slots and runs available."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise WorkloadError(
            f"--workers-scan {text!r} is not a list of worker counts", "write e.g. 1,2,4"
        ) from None
    if any(n < 1 for n in counts) or counts != sorted(set(counts)):
        raise WorkloadError(
            f"--workers-scan {text!r} must rise strictly from 1 or more", "write e.g. 1,2,4"
        )
    if counts[-1] > slots:
        raise WorkloadError(
            f"--workers-scan {counts[-1]} needs {counts[-1]} slots, the devices give {slots}",
            "add GPUs with --devices or raise --per-device",
        )
    runs = min(scan_runs or plan_size, plan_size)
    if runs < counts[-1]:
        raise WorkloadError(
            f"{runs} run{'' if runs == 1 else 's'} cannot keep {counts[-1]} workers busy",
            f"give --scan-runs {counts[-1] * 2} or more (a spec with that many runs)",
        )
    return counts


def scan(
    spec: SweepSpec,
    plan: list[Pset],
    directory: Path,
    slots: list[Slot],
    counts: list[int],
    scan_runs: int | None,
    run_timeout: float | None,
) -> int:
    """Run the scan; print and save the table. 0 when every run of every step succeeded."""
    subset = plan[: scan_runs or len(plan)]
    out = console()
    steps: list[dict[str, Any]] = []
    with sweep_lock(directory):  # the devices are the scan's alone
        for n in counts:
            step_dir = _fresh_step_dir(directory, n)
            save_spec(spec, step_dir)
            database = SweepDatabase(step_dir)
            ctx = RunContext(step_dir, spec.workload, ps.get_uuid(), 0, n)
            out.print(f"scaling step: {len(subset)} runs on {describe(slots[:n])}")
            with SweepProgress(subset, list(spec.vary), out) as progress:
                execute(ctx, subset, slots[:n], database, progress, run_timeout)
            entry = by_invocation(database.read())[-1]
            steps.append({**entry.as_dict(), "slots": [s.label for s in slots[:n]]})
    base = steps[0]
    for step in steps:  # relative to the first step (one worker when the scan starts at 1)
        rate, base_rate = step["runs_per_hour"], base["runs_per_hour"]
        speedup = rate / base_rate if rate is not None and base_rate else None
        step["speedup"] = speedup
        step["efficiency"] = speedup * base["workers"] / step["workers"] if speedup else None
    result = {
        "spec": str(spec.path),
        "workload": spec.workload.name,
        "runs_per_step": len(subset),
        "speedup_over_workers": base["workers"],
        "host": platform.node(),
        "measured_at": utc_now(),
        "command": " ".join(["workloads", *sys.argv[1:]]) if sys.argv else None,
        "steps": steps,
    }
    atomic_write_bytes(directory / SCALING_JSON, (json.dumps(result, indent=2) + "\n").encode())
    console(stderr=False).print(scaling_table(result))
    out.print(f"wrote {directory / SCALING_JSON}")
    return 0 if all(step["failed"] == 0 for step in steps) else 1


def _fresh_step_dir(directory: Path, workers: int) -> Path:
    """``<dir>/scaling/<N>-workers``, emptied (a measurement starts from nothing).

    Made through descriptors of the checked sweep directory, never through a link.
    """
    top = directory / "scaling"
    step = top / f"{workers}-workers"
    with directory_fd(directory) as parent:
        scaling = subdirectory(parent, top.name, top)
    try:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(step.name, dir_fd=scaling)
        os.close(subdirectory(scaling, step.name, step))
    finally:
        os.close(scaling)
    return step


def scaling_table(result: dict[str, Any]) -> Table:
    table = Table(title=f"Sweep throughput, {result['runs_per_step']} runs per step")
    speedup_header = f"speedup vs {result['speedup_over_workers']}"
    for header in ("workers", "devices", "runs ok", "failed", "wall s", "runs/hour",
                   speedup_header, "efficiency"):
        table.add_column(header, justify="right")
    for step in result["steps"]:
        speedup, efficiency = step.get("speedup"), step.get("efficiency")
        table.add_row(
            str(step["workers"]), ", ".join(step["slots"]), str(step["runs"]), str(step["failed"]),
            f"{step['wall_seconds']:.1f}",
            f"{step['runs_per_hour']:.1f}" if step["runs_per_hour"] is not None else "-",
            f"{speedup:.2f}" if speedup is not None else "-",
            f"{efficiency:.0%}" if efficiency is not None else "-",
        )
    return table
