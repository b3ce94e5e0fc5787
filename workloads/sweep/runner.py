"""Start one run as a fresh process on its slot, and turn its end into a database row.

A run is ``python -m workloads <workload> <params> --output <dir>/<pset_id>/out.png``
with the slot's ``CUDA_VISIBLE_DEVICES``: the sweep process never imports a
framework, and each run process sees its device from its first instruction to
its exit. Runs get their own session (Ctrl-C in the terminal reaches only the
sweep, which then stops them on purpose) and die with the sweep (``PR_SET_PDEATHSIG``):
a sweep killed with SIGKILL leaves no orphan writing into a directory that the
restarted sweep is about to reuse.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from workloads import bounded
from workloads.bounded import BadInput, read_json
from workloads.errors import OutOfMemory, WorkloadError
from workloads.safefs import open_file
from workloads.sweep.expand import Pset
from workloads.sweep.lock import RUN_LOCK, open_claim
from workloads.sweep.slots import Slot
from workloads.sweep.workload import Workload

LOG_NAME = "run.log"
OK_STATUSES = ("ok",)
_PR_SET_PDEATHSIG = 1
# Record fields that are not results: the envelope, the machine, the parameters again.
_NOT_RESULTS = frozenset({"schema", "workload", "status", "env", "params", "output"})


@dataclass
class RunContext:
    """What every row of one sweep invocation shares."""

    directory: Path
    workload: Workload
    run_id: str
    run_seq: int
    workers: int


@dataclass
class Running:
    """A run in progress: its process, slot and start time."""

    pset: Pset
    slot: Slot
    process: subprocess.Popen[bytes]
    started: float
    log: int | None  # fd of run.log, the run's stdout and stderr (closed by release)
    deadline: float | None = None
    timed_out: bool = False
    claim: int | None = None  # fd holding the run directory's lock (lock.claim_run)


def run_dir(directory: Path, pset: Pset) -> Path:
    return Path(directory) / pset.pset_id


def record_path(output: Path) -> Path:
    """The workload's record beside its output: out.png -> out.json."""
    return output.with_suffix(".json")


_LIBC = ctypes.CDLL(None, use_errno=True)  # resolved here, not in the forked child


def _die_with_parent(parent: int) -> None:
    """preexec_fn: ask the kernel for SIGKILL when the sweep (our parent) dies."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the sweep died before prctl took effect
        os._exit(1)


class RunNotStarted(WorkloadError):
    """A run could not be started (a full disk, an I/O error at its claim or log): it never ran.

    Nothing of it runs and nothing measured is lost; the sweep keeps it for later
    (:mod:`workloads.sweep.scheduler`), like a row it could not write.
    """

    def __init__(self, directory: Path, exc: OSError) -> None:
        self.reason = exc.strerror or str(exc)
        super().__init__(
            f"cannot start run {directory.name} in {directory.parent} ({self.reason})",
            "free space (or fix the disk) and run the sweep again",
        )


def start(ctx: RunContext, pset: Pset, slot: Slot, timeout: float | None = None) -> Running:
    """Claim the run's directory, clear it (a leftover of an interrupted attempt), launch it.

    Raises :class:`RunBusy`, touching nothing, when another process holds the claim,
    :class:`~workloads.safefs.UnsafePath` when something planted is in the way, and
    :class:`RunNotStarted` when the disk refuses (``ENOSPC``...): no process started.
    """
    directory = run_dir(ctx.directory, pset)
    try:
        claim, folder = open_claim(directory)
    except OSError as exc:
        raise RunNotStarted(directory, exc) from exc
    try:
        _clear(folder)
        output = directory / ctx.workload.output_name
        argv = ctx.workload.command(pset.params, str(output))
        log = open_file(directory / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd=folder)
        try:
            _write_all(log, ("$ " + " ".join(argv) + "\n").encode())
            parent = os.getpid()
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=slot.environ(os.environ),
                start_new_session=True,
                pass_fds=(claim,),  # the run holds its claim too, for as long as it lives
                preexec_fn=lambda: _die_with_parent(parent),  # safe: the sweep runs one thread
            )
        except BaseException:
            os.close(log)
            raise
    except OSError as exc:
        os.close(claim)
        raise RunNotStarted(directory, exc) from exc
    except BaseException:
        os.close(claim)
        raise
    finally:
        os.close(folder)
    now = time.time()
    deadline = now + timeout if timeout else None
    return Running(pset, slot, process, now, log, deadline=deadline, claim=claim)


def _write_all(fd: int, data: bytes) -> None:
    """``write`` until all of ``data`` is out (a nearly full disk writes short)."""
    while data:
        data = data[os.write(fd, data):]


def _clear(folder: int) -> None:
    """Remove everything in a claimed run directory but the claim itself (links not followed)."""
    with os.scandir(folder) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if name == RUN_LOCK:
            continue
        if is_dir:
            shutil.rmtree(name, dir_fd=folder)
        else:
            os.unlink(name, dir_fd=folder)


def release(running: Running) -> None:
    """Close the run's log and drop this process's hold on its claim (idempotent)."""
    if running.log is not None:
        os.close(running.log)
        running.log = None
    if running.claim is not None:
        os.close(running.claim)
        running.claim = None


def stop(running: Running, grace: float = 10.0) -> None:
    """End a run on purpose (interrupt, timeout): SIGTERM, then SIGKILL after ``grace``."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(running.process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            running.process.wait(wait)
            break
    release(running)


def finish(ctx: RunContext, running: Running) -> dict[str, Any]:
    """The database row of an ended run: parameters, psweep fields, outcome, results."""
    release(running)
    code = running.process.returncode
    ended = time.time()
    directory = run_dir(ctx.directory, running.pset)
    output = directory / ctx.workload.output_name
    record = _read_ok_record(record_path(output))
    failure, error = None, None
    if running.timed_out:
        took = ended - running.started
        failure, error = "timeout", f"stopped by --run-timeout after {took:.0f} s"
    elif code != 0:
        failure, error = _classify(code, directory / LOG_NAME)
    elif record is None:
        failure, error = "error", f"exited 0 but wrote no record {record_path(output).name}"
    row = base_row(ctx, running.pset, running.slot, running.started, ended - running.started)
    row.update(_failed=failure is not None, _exc_txt=error, _failure=failure, _exit_code=code)
    if failure is None and record is not None:
        row.update(results(record, ctx.workload))
    return row


def adopt(ctx: RunContext, pset: Pset) -> dict[str, Any] | None:
    """The row of a run that finished while no sweep was watching (killed just after), if any.

    The run wrote its record atomically at its very end, so a record with status
    ok means the run is complete: redoing it would waste its GPU time.
    """
    output = run_dir(ctx.directory, pset) / ctx.workload.output_name
    record = _read_ok_record(record_path(output))
    if record is None or not output.exists():
        return None
    ended = record_path(output).stat().st_mtime
    try:
        begin = min(pd.Timestamp(record["started_at"]).timestamp(), ended)
    except (KeyError, ValueError, TypeError):
        begin = ended
    row = base_row(ctx, pset, None, begin, ended - begin)
    row.update(_failed=False, _exc_txt=None, _failure=None, _exit_code=0, _adopted=True)
    row.update(results(record, ctx.workload))
    return row


def base_row(
    ctx: RunContext, pset: Pset, slot: Slot | None, started: float, runtime: float
) -> dict[str, Any]:
    """Parameters plus the bookkeeping fields psweep's own ``run`` would write."""
    output = f"{pset.pset_id}/{ctx.workload.output_name}"
    row: dict[str, Any] = dict(pset.params)
    row.update(
        _vary=pset.vary,
        _pset_id=pset.pset_id,
        _pset_hash=pset.pset_hash,
        _run_id=ctx.run_id,
        _run_seq=ctx.run_seq,
        _calc_dir=str(ctx.directory.resolve()),
        _time_utc=pd.Timestamp(started, unit="s"),
        _exec_host=platform.node(),
        _pset_runtime=runtime,
        _workload=ctx.workload.name,
        _device=slot.label if slot else None,
        _slot=slot.index if slot else None,
        _workers=ctx.workers,
        _output=output,
        _record=str(Path(output).with_suffix(".json")),
        _log=f"{pset.pset_id}/{LOG_NAME}",
    )
    return row


def results(record: Mapping[str, Any], workload: Workload) -> dict[str, Any]:
    """Scalar results of a record as psweep result columns (trailing ``_``).

    One level of nesting is flattened (``last_loss.total`` -> ``last_loss_total_``);
    lists such as a loss history stay in the record file, which the report reads.
    Parameters echoed in the record are left out: the row has them already.
    """
    out: dict[str, Any] = {}
    for key, value in record.items():
        if key in _NOT_RESULTS or key in workload.options:
            continue
        if isinstance(value, dict):
            for sub, inner in value.items():
                if _is_scalar(inner):
                    out[f"{key}_{sub}_"] = inner
        elif _is_scalar(value):
            out[f"{key}_"] = value
    return out


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, bool | int | float | str)


def _read_ok_record(path: Path) -> dict[str, Any] | None:
    try:
        record = read_json(path)
    except (OSError, BadInput):
        return None
    if not isinstance(record, dict) or record.get("status") not in OK_STATUSES:
        return None
    return record


def _classify(code: int, log: Path) -> tuple[str, str]:
    """(kind, one-line reason) of a failed run from its exit status and log."""
    last = _last_error_line(log)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        reason = f"worker crashed: killed by {name}"
        return "crash", f"{reason} ({last})" if last else reason
    if code == OutOfMemory.exit_code:
        return "oom", last or "out of memory (exit 3)"
    return "error", last or f"exit status {code}"


LOG_TAIL_BYTES = 64 << 10  # where a run's last error line is: its log's end, not all of it


def _last_error_line(log: Path) -> str | None:
    """The workload's ``... error: ...`` line, else the last line (a traceback's end).

    Only the log's last :data:`LOG_TAIL_BYTES` are read (:func:`bounded.read_tail`): a
    run that printed gigabytes costs the runner no more than one that printed a page.
    """
    try:
        tail = bounded.read_tail(log, LOG_TAIL_BYTES).decode("utf-8", "replace")
    except (OSError, bounded.BadInput):
        return None
    lines = [line.strip() for line in tail.splitlines()]
    lines = [line for line in lines if line and not line.startswith("$ ")]
    for line in reversed(lines):
        if ": error: " in line:
            return line
    return lines[-1] if lines else None
