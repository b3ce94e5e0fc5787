"""Killed, interrupted, restarted: no run lost, no finished run done twice, one sweep per dir."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tests.sweep.conftest import (
    FAKE,
    REPO,
    alive,
    calls,
    read_db,
    start_sweep,
    sweep_cli,
    wait_until,
    write_spec,
)
from workloads.sweep.expand import expand
from workloads.sweep.spec import load_spec


def slow_spec(tmp_path: Path, runs: int = 5, sleep: float = 1.5) -> Path:
    return write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "output": "out.png", "defaults": {"sleep": sleep},
        "vary": {"value": [round(0.1 * (i + 1), 1) for i in range(runs)]},
    })


def gated_spec(tmp_path: Path, tokens: Path, runs: int) -> Path:
    """Runs that end only with a token from ``tokens`` (see fake_workload ``--tokens``)."""
    return write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "output": "out.png", "defaults": {"sleep": 0.2, "tokens": str(tokens)},
        "vary": {"value": [round(0.1 * (i + 1), 1) for i in range(runs)]},
    })


def started_indexes(log: str) -> list[int]:
    return [int(m) for m in re.findall(r"start \[(\d+)\]", log)]


def test_killed_sweep_resumes_without_losing_or_repeating_a_run(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    # One token: exactly one run of the first sweep can end, however slow the machine.
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    (tokens / "token-0").touch()
    spec = gated_spec(tmp_path, tokens, runs=5)
    directory = tmp_path / "d"
    args = [str(spec), "--dir", str(directory), "--per-device", "2"]
    first = start_sweep(args, sweep_env, tmp_path / "first.log")
    try:
        wait_until(lambda: len(read_db(directory)) >= 1, 120, "the first finished run")

        second = sweep_cli(args, sweep_env)  # while the first one runs
        assert second.returncode == 2
        assert f"another sweep (pid {first.pid} on" in second.stderr
        assert "give this sweep another --dir" in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)

    before = read_db(directory)
    orphans = [c["pid"] for c in calls(sweep_env) if c["event"] == "start"]
    wait_until(lambda: not any(alive(pid) for pid in orphans), 10, "runs of the killed sweep")
    assert len(before) == 1

    (tokens / "open").touch()
    resumed = sweep_cli(args, sweep_env)
    assert resumed.returncode == 0, resumed.stderr
    after = read_db(directory)
    assert len(after) == 5 and after["_pset_hash"].is_unique
    assert not after["_failed"].any()
    plan = expand(load_spec(spec))
    assert set(after["_pset_hash"]) == {p.pset_hash for p in plan}  # none lost
    # none finished twice: every run's end was logged once, and old rows were not redone
    ends = Counter(c["output"] for c in calls(sweep_env) if c["event"] == "end")
    assert set(ends.values()) == {1} and len(ends) == 5
    kept = after.set_index("_pset_hash").loc[before["_pset_hash"]]
    assert list(kept["_run_id"]) == list(before["_run_id"])
    done_before = {p.index for p in plan if p.pset_hash in set(before["_pset_hash"])}
    adopted = resumed.stderr.count("adopted run")
    assert len(started_indexes(resumed.stderr)) + adopted == 5 - len(done_before)
    assert not done_before & set(started_indexes(resumed.stderr))


def test_ctrl_c_stops_the_runs_in_flight_and_keeps_the_finished_ones(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    # Two tokens: two runs end, the third waits in flight until Ctrl-C, on any machine.
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    for i in range(2):
        (tokens / f"token-{i}").touch()
    spec = gated_spec(tmp_path, tokens, runs=4)
    directory = tmp_path / "d"
    args = [str(spec), "--dir", str(directory), "--per-device", "2"]
    sweep = start_sweep(args, sweep_env, tmp_path / "sweep.log")
    try:
        wait_until(lambda: len(read_db(directory)) >= 2
                   and len([c for c in calls(sweep_env) if c["event"] == "start"]) >= 3,
                   120, "two finished runs and a third started")
        sweep.send_signal(signal.SIGINT)
        assert sweep.wait(30) == 130
    finally:
        if sweep.poll() is None:
            sweep.kill()
    log = (tmp_path / "sweep.log").read_text()
    assert "interrupted; results written so far are kept" in log
    rows = read_db(directory)
    assert not rows["_failed"].any()  # stopped on purpose: not recorded as failures
    pids = [c["pid"] for c in calls(sweep_env) if c["event"] == "start"]
    assert not any(alive(pid) for pid in pids)
    assert len(rows) == 2
    (tokens / "open").touch()
    resumed = sweep_cli(args, sweep_env)
    assert resumed.returncode == 0
    assert len(read_db(directory)) == 4


def test_a_run_that_finished_unrecorded_is_adopted_not_rerun(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = slow_spec(tmp_path, runs=3, sleep=0.1), tmp_path / "d"
    pset = expand(load_spec(spec))[1]
    output = directory / pset.pset_id / "out.png"
    output.parent.mkdir(parents=True)
    # as if the sweep had been killed between this run's exit and its database row
    subprocess.run([sys.executable, "-m", FAKE, "--value=0.2", "--sleep=0.1",
                    f"--output={output}"], env=sweep_env, cwd=REPO, check=True)
    result = sweep_cli([str(spec), "--dir", str(directory)], sweep_env)
    assert result.returncode == 0, result.stderr
    assert f"adopted run {pset.pset_id}" in result.stderr
    starts = Counter(c["output"] for c in calls(sweep_env) if c["event"] == "start")
    assert starts[str(output)] == 1 and len(starts) == 3
    row = read_db(directory).set_index("_pset_id").loc[pset.pset_id]
    assert row["_adopted"] is True and row["losses_total_"] == 0.2**2


def test_run_one_adds_one_row_for_job_array_tasks(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = slow_spec(tmp_path, runs=3, sleep=0.1), tmp_path / "d"
    env = {**sweep_env, "CUDA_VISIBLE_DEVICES": "7"}  # as SLURM sets it: inherited, not replaced
    first = sweep_cli([str(spec), "--dir", str(directory), "--run-one", "2"], env)
    assert first.returncode == 0, first.stderr
    rows = read_db(directory)
    assert list(rows["value"]) == [0.3] and list(rows["visible_devices_"]) == ["7"]
    again = sweep_cli([str(spec), "--dir", str(directory), "--run-one", rows["_pset_id"][0]], env)
    assert "already done" in again.stderr and len(read_db(directory)) == 1
    plan = sweep_cli([str(spec), "--dir", str(directory), "--dry-run"], env)
    assert plan.returncode == 0
    assert plan.stdout.count("to run") == 2 and plan.stdout.count("done") == 1


def test_run_one_whose_run_is_stopped_by_sigterm_adds_no_row(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    """scancel signals every process of the step; the run may die of it first.

    Here only the run gets SIGTERM, the widest form of that race: the task must
    say the run was stopped and add no row, so the next submission runs it again.
    """
    spec, directory = slow_spec(tmp_path, runs=2, sleep=60), tmp_path / "d"
    task = start_sweep([str(spec), "--dir", str(directory), "--run-one", "0"], sweep_env,
                       tmp_path / "task.log")
    try:
        wait_until(lambda: any(c["event"] == "start" for c in calls(sweep_env)), 60,
                   "the run to start")
        [run_pid] = [c["pid"] for c in calls(sweep_env) if c["event"] == "start"]
        subprocess.run(["kill", "-TERM", str(run_pid)], check=True)
        assert task.wait(60) == 128 + signal.SIGTERM
    finally:
        if task.poll() is None:
            task.kill()
    log = (tmp_path / "task.log").read_text()
    assert "was stopped by SIGTERM; no row added" in log, log
    assert read_db(directory).empty
