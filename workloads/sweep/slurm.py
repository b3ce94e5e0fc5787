"""``workloads sweep SPEC --backend slurm``: the runs left, submitted as one SLURM job array.

Why a job array rather than psweep with dask-jobqueue's ``SLURMCluster``: every run
is then a job the scheduler itself knows (``squeue``, ``sacct``, ``scancel`` and
requeue per task, per-task logs and limits, fair-share accounting as usual);
nothing has to stay alive on the login node for the days a study takes (a Dask
cluster needs its client and scheduler running the whole time, and pulls in
dask.distributed); and the tasks need no new moving part: each one is
``workloads sweep SPEC --dir DIR --run-one ID``, which adds its row to the same
psweep database under the database's file lock.

Submission works out the runs left exactly as the local backend does (resume by
pset hash, ``--retry-failed``, adoption of runs that finished unrecorded), writes
``DIR/slurm/`` (the array script, the list of pset ids its task ids map to, a log
of submissions, one log per task) and submits with ``sbatch --parsable``. A task
whose run already has its row exits 0 at once, so a requeued task, or the array
script submitted again by hand, repeats nothing. A second submission is refused
while an array of the same directory is still queued or running.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError, clip
from workloads.records import append_line, atomic_write_bytes, utc_now
from workloads.safefs import directory_fd, make_directory, subdirectory
from workloads.sweep.database import SweepDatabase
from workloads.sweep.expand import Pset
from workloads.sweep.lock import sweep_lock
from workloads.sweep.progress import SweepProgress, console
from workloads.sweep.session import prepare, remaining, summarise
from workloads.sweep.slurm_queue import (
    SLURM_DIR,
    SUBMISSIONS,
    job_name,
    last_line,
    refuse_if_array_queued,
    run_slurm,
)
from workloads.sweep.spec import SweepSpec

SCRIPT = "array.sbatch"
PSETS = "psets.txt"  # array task N runs the pset id on line N + 1
DEFAULT_GRES = "gpu:1"
POLL_SECONDS = 2.0  # squeue while waiting: light on slurmctld, a short delay after the end
SQUEUE_RETRIES = 5  # consecutive squeue failures (a busy slurmctld times out) before giving up
# Every value pasted into the batch script is checked: a newline (or any control
# character) in a spec path, --gres or --sbatch-arg would end the #SBATCH or comment
# line it sits in and start a shell command of the attacker's choosing.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_GRES = re.compile(r"[A-Za-z0-9_.:,+/-]+")  # gpu:1, gpu:a100:2, gpu:1,shard:2
_SBATCH_PATH_BAD = re.compile(r"[\s\"'\\]")  # #SBATCH lines are split by sbatch, unquoted
# sbatch options the backend sets itself: the array, the name it finds the array by, the mode
_OWN_LONG = ("--array", "--job-name", "--parsable", "--wait")
_OWN_SHORT = ("-a", "-J", "-W")


@dataclass(frozen=True)
class ArrayOptions:
    """How to submit: the ``--backend slurm`` options of ``workloads sweep``."""

    sbatch_args: tuple[str, ...] = ()
    parallel: int | None = None  # the array's %K throttle
    gres: str | None = DEFAULT_GRES  # None: no --gres line (CPU-only clusters)
    launcher: tuple[str, ...] = field(default_factory=lambda: (sys.executable,))
    wait: bool = False
    run_timeout: float | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ArrayOptions:
        gres = DEFAULT_GRES if args.gres is None else args.gres.strip()
        if args.launcher is not None:
            check_script_value("--launcher", args.launcher)
        launcher = tuple(shlex.split(args.launcher)) if args.launcher is not None else None
        if launcher == ():
            raise WorkloadError("--launcher is empty", "give a command, e.g. 'python3'")
        return cls(
            sbatch_args=tuple(check_sbatch_args(args.sbatch_arg)),
            parallel=args.array_parallel,
            gres=None if gres.lower() in ("", "none") else check_gres(gres),
            launcher=launcher or (sys.executable,),
            wait=args.wait,
            run_timeout=args.run_timeout,
        )


def check_script_value(what: str, value: str) -> str:
    """``value`` unless it holds a control character, which could break out of its line."""
    if _CONTROL.search(value):
        raise WorkloadError(
            f"{what} {clip(repr(value), 40)} holds a control character, which would end a "
            "batch script line",
            f"give {what} without control characters",
        )
    return value


def check_gres(gres: str) -> str:
    """``--gres``: a generic resource list such as ``gpu:1`` or ``gpu:a100:2``, nothing else."""
    check_script_value("--gres", gres)
    if not _GRES.fullmatch(gres):
        raise WorkloadError(
            f"--gres {gres!r} is not a generic resource list",
            "write it as sbatch does, e.g. --gres gpu:1 or --gres gpu:a100:2 (or none)",
        )
    return gres


def check_sbatch_path(what: str, path: Path) -> str:
    """A path that goes into an ``#SBATCH`` line, which sbatch splits without shell quoting."""
    text = check_script_value(what, str(path))
    if _SBATCH_PATH_BAD.search(text):
        raise WorkloadError(
            f"{what} {text} contains white space, a quote or a backslash, which #SBATCH "
            "lines cannot hold",
            "use a --dir (and working directory) without them",
        )
    return text


def check_sbatch_args(args: Sequence[str]) -> list[str]:
    """``--sbatch-arg`` values: anything sbatch takes except what the backend sets itself."""
    for arg in args:
        check_script_value("--sbatch-arg", arg)
        name = arg.split("=", 1)[0].split()[0] if arg.strip() else ""
        own = name in _OWN_LONG or (not arg.startswith("--") and arg[:2] in _OWN_SHORT)
        if own:
            raise WorkloadError(
                f"--sbatch-arg={arg} sets what the backend sets itself (array, job name, mode)",
                "use --array-parallel for the throttle and --wait to wait; drop the rest",
            )
        if not name.startswith("-") or "\n" in arg:
            raise WorkloadError(
                f"--sbatch-arg={arg!r} is not one sbatch option",
                "write each option whole, e.g. --sbatch-arg=--partition=gpu",
            )
    return list(args)


def require_slurm() -> None:
    """The SLURM client commands this backend calls, or one line saying how to get them."""
    missing = [tool for tool in ("sbatch", "squeue") if shutil.which(tool) is None]
    if missing:
        raise WorkloadError(
            f"--backend slurm needs {missing[0]}, which is not on PATH",
            "run on a SLURM login node (e.g. 'module load slurm' first), or use --backend local",
        )


@dataclass(frozen=True)
class ArrayJob:
    """One submission: which psets, which invocation, how each task starts its run."""

    spec: SweepSpec
    directory: Path
    todo: list[Pset]
    run_id: str
    run_seq: int
    options: ArrayOptions
    workdir: Path  # the tasks' working directory: relative paths in the spec mean the same

    @property
    def name(self) -> str:
        return job_name(self.directory)

    @property
    def folder(self) -> Path:
        return self.directory.resolve() / SLURM_DIR

    @property
    def workers(self) -> int:
        """Runs at once at most: the throughput figure's worker count."""
        return min(self.options.parallel or len(self.todo), len(self.todo))

    def log_path(self, job_id: str, task: int) -> Path:
        return self.folder / f"{job_id}_{task}.out"

    def script(self) -> str:
        """The sbatch script: #SBATCH lines, the invocation's variables, the task's run."""
        self.check()
        last = len(self.todo) - 1
        throttle = f"%{self.options.parallel}" if self.options.parallel else ""
        directives = [
            f"--job-name={self.name}",
            f"--array=0-{last}{throttle}",
            "--ntasks=1",
            f"--output={self.folder}/%A_%a.out",
            f"--chdir={self.workdir}",
        ]
        if self.options.gres:
            directives.append(f"--gres={self.options.gres}")
        directives += self.options.sbatch_args  # after the defaults, so they override them
        command = [
            *self.options.launcher, "-m", "workloads", "sweep", str(self.spec.path.resolve()),
            "--dir", str(self.directory.resolve()), "--run-one",
        ]
        if self.options.run_timeout:
            command += ["--run-timeout", str(self.options.run_timeout)]
        q = shlex.quote
        lines = [
            "#!/bin/bash",
            f"# Written by 'workloads sweep --backend slurm' at {utc_now()}:",
            f"# one array task is one run of {q(str(self.spec.path))} in "
            f"{q(str(self.directory.resolve()))}.",
            f"# Task N runs the pset id on line N+1 of {PSETS} with 'workloads sweep --run-one',",
            "# which adds its row to the sweep's database.pk. A task whose run already has its",
            "# row exits 0 at once: requeueing a task or submitting this file again is harmless.",
            *(f"#SBATCH {directive}" for directive in directives),
            "set -euo pipefail",
            ': "${SLURM_ARRAY_TASK_ID:?submit this file with sbatch: it is a job array}"',
            "# every task adds its row to the same invocation of the sweep (throughput per run_id)",
            f"export WORKLOADS_SWEEP_RUN_ID={q(self.run_id)}",
            f"export WORKLOADS_SWEEP_RUN_SEQ={self.run_seq}",
            f"export WORKLOADS_SWEEP_WORKERS={self.workers}",
            "if [[ -n ${SLURM_CPUS_PER_TASK:-} ]]; then  # on CPU: a thread per granted core",
            "  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}",
            "  export TF_NUM_INTRAOP_THREADS=${TF_NUM_INTRAOP_THREADS:-$SLURM_CPUS_PER_TASK}",
            "fi",
            f"mapfile -t psets < {q(str(self.folder / PSETS))}",
            'pset=${psets[$SLURM_ARRAY_TASK_ID]:-}',
            'if [[ -z $pset ]]; then',
            f'  echo "array task $SLURM_ARRAY_TASK_ID has no line in {PSETS}" >&2',
            "  exit 2",
            "fi",
            f'exec {shlex.join(command)} "$pset"',
        ]
        return "\n".join(lines) + "\n"

    def check(self) -> None:
        """Refuse any value that could break out of its line of :meth:`script`."""
        check_sbatch_path("--dir", self.directory.resolve())
        check_sbatch_path("the working directory", self.workdir.resolve())
        check_script_value("the spec path", str(self.spec.path.resolve()))
        check_script_value("the run id", self.run_id)
        if self.options.gres:
            check_gres(self.options.gres)
        check_sbatch_args(self.options.sbatch_args)
        for part in self.options.launcher:
            check_script_value("--launcher", part)
        for pset in self.todo:
            check_script_value("the pset id", pset.pset_id)

    def write(self) -> Path:
        """``slurm/psets.txt`` and ``slurm/array.sbatch``; the script's path."""
        self.check()
        if not self.directory.exists():
            make_directory(self.directory)
        with directory_fd(self.directory) as parent:  # made in the checked directory
            os.close(subdirectory(parent, self.folder.name, self.folder))
        atomic_write_bytes(self.folder / PSETS, "".join(f"{p.pset_id}\n" for p in self.todo)
                           .encode())
        script = self.folder / SCRIPT
        atomic_write_bytes(script, self.script().encode(), mode=0o755)
        return script

    def submit(self) -> str:
        """Write the files, ``sbatch --parsable`` the script; the array's job id."""
        script = self.write()
        result = run_slurm(["sbatch", "--parsable", str(script)])
        if result.returncode != 0:
            raise WorkloadError(
                f"sbatch refused the array: {last_line(result.stderr)}",
                f"fix the --sbatch-arg/--gres options (script: {script}) and run again",
            )
        job_id = result.stdout.strip().split(";")[0]
        entry = {
            "job_id": job_id,
            "name": self.name,
            "runs": len(self.todo),
            "run_id": self.run_id,
            "submitted_at": utc_now(),
            "sbatch_args": list(self.options.sbatch_args),
        }
        append_line(self.folder / SUBMISSIONS, (json.dumps(entry) + "\n").encode())
        return job_id


def submit_sweep(
    spec: SweepSpec,
    plan: list[Pset],
    directory: Path,
    options: ArrayOptions,
    retry_failed: bool,
) -> int:
    """Submit the runs left as one array; with ``--wait``, wait and summarise like a local sweep."""
    require_slurm()
    out = console()
    with sweep_lock(directory):  # no local sweep, and no second submission, meanwhile
        refuse_if_array_queued(directory)
        database, ctx = prepare(spec, directory, workers=1)
        todo, state = remaining(spec, plan, database, ctx, retry_failed)
        if not todo:
            out.print(f"{state}, nothing to submit")
            return summarise(spec, plan, database, ctx.run_id)
        job = ArrayJob(spec, directory, todo, ctx.run_id, ctx.run_seq, options, Path.cwd())
        job_id = job.submit()
    at_once = f"at most {options.parallel} at once" if options.parallel else "as SLURM grants"
    out.print(f"{state}, {len(todo)} to run: submitted array job {job_id} ({job.name}), "
              f"{len(todo)} tasks, {at_once}")
    out.print(f"task logs: {job.folder}/{job_id}_<task>.out (task N runs line N+1 of "
              f"{job.folder / PSETS})")
    if not options.wait:
        again = shlex.join(["workloads", *sys.argv[1:]])
        out.print(f"watch it:  squeue --me --name={job.name}    (when it has ended: sacct -j "
                  f"{job_id})")
        out.print(f"resume or summarise (submits only the runs without a row): {again}")
        out.print(f"browse the results: workloads report {directory}")
        return 0
    try:
        wait_for_array(job_id, database, job, list(spec.vary))
    except KeyboardInterrupt:
        out.print(f"stopped waiting; array job {job_id} goes on (scancel {job_id} stops it)")
        raise
    report_missing(job, job_id, database)
    return summarise(spec, plan, database, ctx.run_id)


def wait_for_array(
    job_id: str, database: SweepDatabase, job: ArrayJob, varied: list[str]
) -> None:
    """Until the array has left the queue: a line per run as its row lands."""
    seen: set[str] = set()
    failures = 0
    with SweepProgress(job.todo, varied, console()) as progress:
        while True:
            result = run_slurm(["squeue", "--noheader", "--format=%i", f"--jobs={job_id}"])
            gone = "Invalid job id" in result.stderr  # purged after MinJobAge
            failures = 0 if result.returncode == 0 or gone else failures + 1
            if failures >= SQUEUE_RETRIES:
                raise WorkloadError(
                    f"squeue failed {failures} times in a row: {last_line(result.stderr)}",
                    f"the array goes on; check it with 'squeue --jobs={job_id}'",
                )
            queued = result.returncode == 0 and bool(result.stdout.strip())
            for row in _rows_of(database, job.run_id):
                if row["_pset_hash"] not in seen:
                    seen.add(str(row["_pset_hash"]))
                    progress.run_ended(row)
            if gone or (result.returncode == 0 and not queued):
                return
            progress.tick()
            time.sleep(POLL_SECONDS)


def _rows_of(database: SweepDatabase, run_id: str) -> list[dict[str, Any]]:
    df = database.read()
    if df.empty:
        return []
    return [row for row in df.to_dict("records") if str(row["_run_id"]) == run_id]


def report_missing(job: ArrayJob, job_id: str, database: SweepDatabase) -> None:
    """Tasks that ended without a row (cancelled, node lost, killed): where their logs are."""
    known = database.status_by_hash()
    missing = [(task, p) for task, p in enumerate(job.todo) if p.pset_hash not in known]
    out = console()
    for task, pset in missing[:10]:
        out.print(f"run {pset.index} ({pset.pset_id}) has no row: see {job.log_path(job_id, task)}"
                  f" and 'sacct -j {job_id}_{task}'; running this command again resubmits it")
    if len(missing) > 10:
        out.print(f"... and {len(missing) - 10} more without a row")
