"""One invocation of ``workloads sweep``: resume, run, summarise (and its variants).

Resume is by psweep hash: a pset whose hash has a row in the database is done
(or failed, and skipped unless ``--retry-failed``); everything else runs. A run
that had finished when the previous sweep was killed, but whose row was never
written, is adopted from its record instead of being run twice.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import psweep as ps
import yaml
from rich.table import Table

from workloads.errors import WorkloadError
from workloads.records import atomic_write_bytes
from workloads.sweep.database import SPEC_COPY, SweepDatabase
from workloads.sweep.expand import Pset, find, format_value
from workloads.sweep.lock import sweep_lock
from workloads.sweep.progress import SweepProgress, console, format_duration, summary_table
from workloads.sweep.runner import RunContext, adopt, finish, start, stop
from workloads.sweep.scheduler import execute
from workloads.sweep.slots import Slot, describe
from workloads.sweep.slurm_queue import refuse_if_array_queued, task_fields, task_slot
from workloads.sweep.spec import SweepSpec
from workloads.sweep.throughput import by_invocation
from workloads.sweep.workload import BUILTIN_METRICS

SUMMARY_ROWS = 40  # longer sweeps list only their failures; the report has everything
METRIC_HINTS = ("total", "loss", "per_sec", "accuracy")  # for workloads without a list


def prepare(spec: SweepSpec, directory: Path, workers: int) -> tuple[SweepDatabase, RunContext]:
    """Open the database, check it belongs to this workload, save the spec beside it."""
    database = SweepDatabase(directory)
    df = database.read()
    if not df.empty and "_workload" in df:
        others = sorted({str(w) for w in df["_workload"]} - {spec.workload.name})
        if others:
            raise WorkloadError(
                f"{directory} holds a sweep of workload {others[0]!r}, not {spec.workload.name!r}",
                "give this sweep another --dir",
            )
    database.check_writable()
    save_spec(spec, directory)
    # A job array's tasks share their submission's invocation: its id and sequence number.
    run_id = os.environ.get("WORKLOADS_SWEEP_RUN_ID") or ps.get_uuid()
    run_seq = _env_int("WORKLOADS_SWEEP_RUN_SEQ")
    run_seq = database.next_run_seq() if run_seq is None else run_seq
    ctx = RunContext(directory, spec.workload, run_id, run_seq, workers)
    return database, ctx


def _env_int(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def save_spec(spec: SweepSpec, directory: Path) -> None:
    """The normalised spec beside the database: the report's axes and centre."""
    text = yaml.safe_dump(spec.as_dict(), sort_keys=False, default_flow_style=None)
    try:
        atomic_write_bytes(directory / SPEC_COPY, text.encode())
    except OSError as exc:  # a full disk, or a directory where the file goes: before any run
        raise WorkloadError(
            f"cannot write {directory / SPEC_COPY} ({exc.strerror or exc})",
            "free space (or move aside what is there) and run the sweep again",
        ) from exc


def run_sweep(
    spec: SweepSpec,
    plan: list[Pset],
    directory: Path,
    slots: list[Slot],
    retry_failed: bool,
    run_timeout: float | None,
) -> int:
    """Run what is left of the plan on ``slots``; 0 when every run of the plan succeeded."""
    out = console()
    varied = list(spec.vary)
    with sweep_lock(directory):
        refuse_if_array_queued(directory)  # its tasks would run the same psets
        database, ctx = prepare(spec, directory, len(slots))
        todo, state = remaining(spec, plan, database, ctx, retry_failed)
        out.print(f"{state}, {len(todo)} to run on {describe(slots)}")
        if todo:
            with SweepProgress(todo, varied, out) as progress:
                execute(ctx, todo, slots, database, progress, run_timeout)
        return summarise(spec, plan, database, ctx.run_id)


def remaining(
    spec: SweepSpec,
    plan: list[Pset],
    database: SweepDatabase,
    ctx: RunContext,
    retry_failed: bool,
) -> tuple[list[Pset], str]:
    """The psets still to run (every backend runs exactly these) and the sweep's state line.

    Runs that finished without a row (the sweep was killed just after) are adopted first.
    """
    out = console()
    known = database.status_by_hash()
    for pset in plan:
        if pset.pset_hash not in known and (row := adopt(ctx, pset)) is not None:
            database.add(row)
            out.print(f"adopted run {pset.pset_id}: it finished before the last sweep stopped")
    known = database.status_by_hash()
    done = sum(1 for p in plan if known.get(p.pset_hash) is False)
    failed = sum(1 for p in plan if known.get(p.pset_hash) is True)
    todo = [p for p in plan if p.pset_hash not in known or (retry_failed and known[p.pset_hash])]
    note = "" if not failed else f", {failed} failed" + (
        " (to retry)" if retry_failed else " (skipped; --retry-failed reruns them)"
    )
    where = f"sweep {spec.path} ({spec.mode}, {len(plan)} runs) in {ctx.directory}"
    return todo, f"{where}: {done} done{note}"


def summarise(spec: SweepSpec, plan: list[Pset], database: SweepDatabase, run_id: str) -> int:
    """Print the results table and this invocation's throughput; exit status for the sweep."""
    out = console(stderr=False)
    df = database.read()
    rows = _plan_rows(plan, df)
    failed = [row for row in rows if row["_failed"]]
    shown = rows if len(rows) <= SUMMARY_ROWS else failed
    if shown:
        metrics = key_metrics(rows, BUILTIN_METRICS.get(spec.workload.name, ()))
        out.print(summary_table(shown, list(spec.vary), metrics))
    for entry in by_invocation(df):
        if entry.run_id == run_id and entry.runs_per_hour is not None:
            out.print(
                f"this sweep: {entry.runs} runs ok, {entry.failed} failed in "
                f"{format_duration(entry.wall_seconds)} with {entry.workers} workers: "
                f"{entry.runs_per_hour:.1f} runs/hour"
            )
    missing = len(plan) - len(rows)
    out.print(
        f"{len(rows) - len(failed)} of {len(plan)} runs ok, {len(failed)} failed"
        + (f", {missing} not run" if missing else "")
        + f"; database {database.path}; browse with 'workloads report {database.directory}'"
    )
    if failed:
        noun = "run" if len(failed) == 1 else "runs"
        out.print(f"{len(failed)} {noun} failed (errors in the table and database); "
                  "fix the cause and rerun with --retry-failed")
    return 1 if failed or missing else 0


def _plan_rows(plan: list[Pset], df: pd.DataFrame) -> list[dict[str, Any]]:
    if df.empty:
        return []
    by_hash = {str(row["_pset_hash"]): row for row in df.to_dict("records")}
    return [by_hash[p.pset_hash] for p in plan if p.pset_hash in by_hash]


def key_metrics(
    rows: list[dict[str, Any]], preferred: Sequence[str] = (), limit: int = 3
) -> list[str]:
    """The workload's preferred result columns, else the first numeric ones, losses first."""
    present = {key for row in rows for key in row}
    chosen = [name for name in preferred if name in present]
    if chosen:
        return chosen[:limit]
    names: list[str] = []
    for row in rows:
        for key, value in row.items():
            numeric = isinstance(value, int | float) and not isinstance(value, bool)
            if key.endswith("_") and not key.startswith("_") and numeric and key not in names:
                names.append(key)
    ranked = sorted(names, key=lambda n: next(
        (i for i, hint in enumerate(METRIC_HINTS) if hint in n), len(METRIC_HINTS)))
    return ranked[:limit]


def run_one(
    spec: SweepSpec, plan: list[Pset], directory: Path, key: str, run_timeout: float | None
) -> int:
    """Run one pset on the devices this process sees and add its row (job-array tasks).

    Stopped (SIGTERM from ``scancel``, Ctrl-C), it stops its run and adds no row:
    the next submission runs it again.
    """
    pset = find(plan, key)
    database, ctx = prepare(spec, directory, workers=_env_int("WORKLOADS_SWEEP_WORKERS") or 1)
    out = console()
    if database.status_by_hash().get(pset.pset_hash) is False:
        out.print(f"run {pset.index} ({pset.pset_id}) is already done")
        return 0
    running = start(ctx, pset, task_slot(os.environ), run_timeout)
    try:
        running.process.wait(run_timeout)
    except subprocess.TimeoutExpired:
        running.timed_out = True
        stop(running)
    except BaseException:
        stop(running, grace=5.0)
        raise
    stopped_by = _stopping_signal(running.process.returncode)
    if stopped_by is not None and not running.timed_out:
        # scancel signals the whole step: the run may die of it before this process's
        # own handler fires. Either way the run was stopped, not failed: no row.
        out.print(f"run {pset.index} ({pset.pset_id}) was stopped by {stopped_by.name}; "
                  "no row added, the next submission runs it again")
        return 128 + stopped_by.value
    row = finish(ctx, running)
    row.update(task_fields(os.environ))
    database.add(row)
    state = f"failed ({row['_failure']}): {row['_exc_txt']}" if row["_failed"] else "ok"
    out.print(f"run {pset.index} ({pset.pset_id}) {pset.label(list(spec.vary))}: {state}")
    return 1 if row["_failed"] else 0


def _stopping_signal(returncode: int | None) -> signal.Signals | None:
    """SIGTERM or SIGINT when that is what ended the run (a negative return code)."""
    if returncode is None or returncode >= 0:
        return None
    received = signal.Signals(-returncode)
    return received if received in (signal.SIGTERM, signal.SIGINT) else None


def print_plan(spec: SweepSpec, plan: list[Pset], directory: Path) -> int:
    """``--dry-run``: every run with its index, id and state in the database."""
    known = SweepDatabase(directory).status_by_hash() if directory.exists() else {}
    table = Table(title=f"{spec.path}: {spec.mode} sweep of {spec.workload.name}, {len(plan)} runs")
    for header in ("#", "pset id", "state", "varies", *spec.vary):
        table.add_column(header)
    for pset in plan:
        state = {None: "to run", False: "done", True: "failed"}[known.get(pset.pset_hash)]
        values = [format_value(pset.params.get(name)) for name in spec.vary]
        table.add_row(str(pset.index), pset.pset_id, state, pset.vary or "", *values)
    out = console(stderr=False)
    out.print(table)
    out.print(f"sweep directory: {directory}")
    return 0
