"""What a sweep needs to know of SLURM whatever backend runs it: the queue and the task.

Split from ``slurm.py`` so that the session (which computes the runs left, for
every backend) never imports a backend: ``slurm.py`` imports the session, the
session imports only this. A local sweep asks here whether an array of its
directory is still queued; a ``--run-one`` task reads its slot and job id here.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError
from workloads.sweep.slots import Slot

SLURM_DIR = "slurm"
SUBMISSIONS = "submissions.jsonl"
JOB_PREFIX = "wsweep-"


def job_name(directory: Path) -> str:
    """The array's name, the same for every submission of one sweep directory."""
    digest = hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()
    return JOB_PREFIX + digest[:10]


def run_slurm(argv: list[str]) -> subprocess.CompletedProcess[str]:
    """A SLURM client command, its output captured (squeue, sbatch: never interactive)."""
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)


def last_line(text: str) -> str:
    """The last non-empty line of a SLURM command's message: the one that says why."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def queued_arrays(name: str) -> list[str]:
    """Ids of this user's jobs named ``name`` still pending, running or completing."""
    result = run_slurm(["squeue", "--me", "--noheader", "--format=%i", f"--name={name}"])
    if result.returncode != 0:
        raise WorkloadError(
            f"squeue failed: {last_line(result.stderr)}",
            "check that this host reaches the SLURM controller ('sinfo'), or set SLURM_CONF",
        )
    return sorted({line.split("_")[0] for line in result.stdout.split() if line})


def refuse_if_array_queued(directory: Path) -> None:
    """Refuse to start runs of ``directory`` while an array of it is queued or running.

    Only a directory that was ever submitted asks SLURM: local sweeps elsewhere
    never depend on a reachable controller.
    """
    if not (Path(directory) / SLURM_DIR / SUBMISSIONS).exists():
        return
    if shutil.which("squeue") is None:
        return
    name = job_name(directory)
    jobs = queued_arrays(name)
    if jobs:
        raise WorkloadError(
            f"SLURM array job {jobs[0]} of {directory} is still queued or running",
            f"wait for it, or 'scancel {jobs[0]}' and run this command again",
        )


def task_slot(environ: Mapping[str, str]) -> Slot:
    """The slot of a ``--run-one`` task: the devices it was given, labelled for the row."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    label = "inherited" if visible is None else f"GPU {visible}" if visible else "CPU"
    return Slot(index=0, label=label, visible=None, shared_by=1)


def task_fields(environ: Mapping[str, str]) -> dict[str, Any]:
    """``_slurm_job`` (``JOB_TASK``, as in the log's name) for a row written by an array task."""
    array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return {"_slurm_job": f"{array}_{task}"}
    if job := environ.get("SLURM_JOB_ID"):
        return {"_slurm_job": job}
    return {}
