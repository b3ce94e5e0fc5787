"""``workloads sweep --backend slurm`` on a real local SLURM cluster: array, cancel, resume.

The style sweep is the one tests/sweep/test_style_sweep.py runs locally (three
learning rates of ``workloads style --weights random --width 48 --iterations 10``),
here submitted as one job array to slurmctld/slurmd on 127.0.0.1. Every array task
is a real ``workloads sweep --run-one`` process adding its row to the psweep
database; nothing about SLURM is faked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psweep as ps
import pytest
import yaml

from tests.slurm.conftest import REPO
from workloads.errors import one_line
from workloads.sweep.expand import expand
from workloads.sweep.slurm import job_name
from workloads.sweep.spec import load_spec

STYLE_SPEC = {
    "workload": "style",
    "mode": "star",
    "defaults": {"weights": "random", "width": 48, "iterations": 10},
    "vary": {"learning_rate": [1, 10, 30]},
}
# one CPU per task: the node declares 4, so up to 4 runs at once; no GPUs, so no --gres
ON_THIS_CLUSTER = ["--backend", "slurm", "--gres", "none", "--sbatch-arg=--cpus-per-task=1",
                   "--sbatch-arg=--time=10"]


@pytest.fixture
def env(slurm_env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """The cluster's environment for sweep processes; the tasks inherit it (sbatch --export)."""
    out = dict(slurm_env)
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), out.get("PYTHONPATH")]))
    out["WORKLOADS_RESULTS"] = str(tmp_path / "results")
    out.pop("WORKLOADS_SWEEP_RUN_ID", None)
    return out


def write_spec(path: Path, spec: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def sweep(args: list[str], env: dict[str, str], cwd: Path,
          timeout: float = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workloads", "sweep", *args],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
    )


def read_db(directory: Path) -> pd.DataFrame:
    path = directory / "database.pk"
    return ps.df_read(str(path)) if path.exists() else pd.DataFrame()


def squeue(job: str, env: dict[str, str], *extra: str) -> list[str]:
    result = subprocess.run(["squeue", "--noheader", f"--jobs={job}", *extra], env=env,
                            capture_output=True, text=True, check=False, timeout=30)
    return result.stdout.split("\n") if result.returncode == 0 and result.stdout.strip() else []


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def submitted_job(result: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"submitted array job (\d+)", result.stderr)
    assert found, result.stderr
    return found.group(1)


def cancel(job: str, env: dict[str, str]) -> None:
    subprocess.run(["scancel", job], env=env, check=False, capture_output=True, timeout=30)
    wait_until(lambda: not squeue(job, env), 60, f"job {job} to leave the queue")


def error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


@pytest.mark.slow
def test_style_sweep_runs_as_one_array_into_the_database(
    env: dict[str, str], tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "lr.yaml", STYLE_SPEC)
    directory = tmp_path / "sweep"
    result = sweep([str(spec), "--dir", str(directory), *ON_THIS_CLUSTER, "--wait"], env, tmp_path)
    assert result.returncode == 0, result.stderr
    job = submitted_job(result)
    assert "0 done, 3 to run: submitted array job" in result.stderr
    assert "Sweep results" in result.stdout and "3 of 3 runs ok, 0 failed" in result.stdout

    rows = read_db(directory)
    plan = expand(load_spec(spec))
    assert len(rows) == 3 and not rows["_failed"].any()
    assert sorted(rows["_pset_hash"]) == sorted(p.pset_hash for p in plan)  # each run once
    assert rows["_run_id"].nunique() == 1 and set(rows["_workers"]) == {3}

    slurm = directory / "slurm"
    psets = (slurm / "psets.txt").read_text().split()
    script = (slurm / "array.sbatch").read_text()
    assert f"#SBATCH --job-name={job_name(directory)}" in script
    assert "#SBATCH --array=0-2\n" in script and "--gres" not in script
    for _, row in rows.iterrows():
        task = psets.index(row["_pset_id"])  # array task N ran line N+1
        assert row["_slurm_job"] == f"{job}_{task}" and row["_device"] == "CPU"
        assert f"learning_rate={row['learning_rate']:g}: ok" in (
            slurm / f"{job}_{task}.out").read_text()
        record = json.loads((directory / row["_record"]).read_text())
        assert record["status"] == "ok" and record["learning_rate"] == row["learning_rate"]
        assert row["last_loss_total_"] == record["last_loss"]["total"]
    assert not squeue(job, env)  # --wait returned after the array left the queue


@pytest.mark.slow
def test_cancelled_midway_and_resumed_runs_each_pset_exactly_once(
    env: dict[str, str], tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "lr.yaml", STYLE_SPEC)
    directory = tmp_path / "sweep"
    args = [str(spec), "--dir", str(directory), *ON_THIS_CLUSTER, "--array-parallel", "1"]
    submitted = sweep(args, env, tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    job = submitted_job(submitted)
    assert "#SBATCH --array=0-2%1\n" in (directory / "slurm" / "array.sbatch").read_text()
    assert f"squeue --me --name={job_name(directory)}" in submitted.stderr  # how to watch it

    try:
        wait_until(lambda: len(read_db(directory)) >= 1, 150, "the first run's row")
        first = read_db(directory).iloc[0]
        first_record = directory / first["_record"]
        first_mtime = first_record.stat().st_mtime
        # cancel once the next task has started its run: a run killed midway, not one never begun
        second = (directory / "slurm" / "psets.txt").read_text().split()[1]
        wait_until(lambda: (directory / second / "run.log").exists()
                   or len(read_db(directory)) > 1, 60, "the second run to start")
    finally:
        cancel(job, env)

    cancelled = read_db(directory)
    assert 1 <= len(cancelled) <= 2  # 2 only if the second run beat the scancel
    assert cancelled["_pset_hash"].is_unique and not cancelled["_failed"].any()
    for _, row in cancelled.iterrows():
        assert (directory / row["_record"]).exists()  # no row without its run's record
    if len(cancelled) == 1:  # the task stopped its run on SIGTERM and added no row
        log = (directory / "slurm" / f"{job}_1.out").read_text()
        assert "CANCELLED" in log and "received SIGTERM" in log
        assert not (directory / second / "out.json").exists()

    resumed = sweep([*args, "--wait"], env, tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    left = 3 - len(cancelled)
    assert f"{len(cancelled)} done, {left} to run: submitted array job" in resumed.stderr
    resubmitted = (directory / "slurm" / "psets.txt").read_text().split()
    assert len(resubmitted) == left and not set(resubmitted) & set(cancelled["_pset_id"])

    after = read_db(directory)
    plan = expand(load_spec(spec))
    assert len(after) == 3 and not after["_failed"].any()
    assert sorted(after["_pset_hash"]) == sorted(p.pset_hash for p in plan)
    kept = after.set_index("_pset_hash").loc[first["_pset_hash"]]
    assert kept["_run_id"] == first["_run_id"] and kept["_time_utc"] == first["_time_utc"]
    assert kept["_slurm_job"] == first["_slurm_job"]
    assert first_record.stat().st_mtime == first_mtime  # not run again
    assert after[after["_pset_hash"] != first["_pset_hash"]]["_run_id"].nunique() == 1


def test_failed_runs_are_resubmitted_only_with_retry_failed(
    env: dict[str, str], tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "fail.yaml", {
        "workload": "tests.sweep.fake_workload", "mode": "grid", "output": "out.png",
        "vary": {"value": [0.5, -1.0]},  # a negative value makes the run fail
    })
    directory = tmp_path / "sweep"
    args = [str(spec), "--dir", str(directory), *ON_THIS_CLUSTER, "--wait"]
    first = sweep(args, env, tmp_path, timeout=120)
    assert first.returncode == 1, first.stderr
    rows = read_db(directory).set_index("value")
    assert list(rows["_failed"].sort_index()) == [True, False]
    assert "is negative" in rows.loc[-1.0, "_exc_txt"]
    submissions = directory / "slurm" / "submissions.jsonl"
    assert len(submissions.read_text().splitlines()) == 1

    skipped = sweep(args, env, tmp_path, timeout=120)
    assert skipped.returncode == 1 and "nothing to submit" in skipped.stderr
    assert "1 failed (skipped; --retry-failed reruns them)" in skipped.stderr
    assert len(submissions.read_text().splitlines()) == 1

    retried = sweep([*args, "--retry-failed"], env, tmp_path, timeout=120)
    assert retried.returncode == 1 and "1 to run: submitted array job" in retried.stderr
    assert (directory / "slurm" / "psets.txt").read_text().split() == [
        rows.loc[-1.0, "_pset_id"]]
    again = read_db(directory).set_index("value")
    assert len(again) == 2  # the failed run's row was replaced, not duplicated
    assert again.loc[-1.0, "_run_id"] != rows.loc[-1.0, "_run_id"]
    assert again.loc[0.5, "_run_id"] == rows.loc[0.5, "_run_id"]


def test_without_sbatch_on_path_is_one_line(env: dict[str, str], tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "lr.yaml", STYLE_SPEC)
    result = sweep([str(spec), "--dir", str(tmp_path / "d"), *ON_THIS_CLUSTER],
                   {**env, "PATH": str(tmp_path / "empty")}, tmp_path, timeout=60)
    assert result.returncode == 2
    assert error_lines(result) == [
        "workloads sweep: error: --backend slurm needs sbatch, which is not on PATH; run on a "
        "SLURM login node (e.g. 'module load slurm' first), or use --backend local"
    ]
    assert not (tmp_path / "d" / "slurm").exists()


def test_a_second_submission_while_the_array_is_queued_is_refused(
    env: dict[str, str], tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "lr.yaml", STYLE_SPEC)
    directory = tmp_path / "sweep"
    args = [str(spec), "--dir", str(directory), *ON_THIS_CLUSTER]
    held = sweep([*args, "--sbatch-arg=--hold"], env, tmp_path, timeout=60)  # stays pending
    assert held.returncode == 0, held.stderr
    job = submitted_job(held)
    try:
        assert squeue(job, env, "--format=%T") and "PENDING" in squeue(job, env, "--format=%T")[0]
        expected = "workloads sweep: error: " + one_line(
            f"SLURM array job {job} of {directory} is still queued or running",
            f"wait for it, or 'scancel {job}' and run this command again")
        second = sweep(args, env, tmp_path, timeout=60)
        assert second.returncode == 2 and error_lines(second) == [expected]
        local = sweep([str(spec), "--dir", str(directory), "--devices", "cpu"], env, tmp_path,
                      timeout=60)  # the local backend would run the same psets: refused too
        assert local.returncode == 2 and error_lines(local) == [expected]
        assert len((directory / "slurm" / "submissions.jsonl").read_text().splitlines()) == 1
    finally:
        cancel(job, env)
    assert not (directory / "database.pk").exists()  # nothing ran
