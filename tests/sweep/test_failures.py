"""Failed runs are rows too: recorded with their error at once, while the others go on."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from tests.sweep.conftest import FAKE, calls, read_db, sweep_cli, write_spec


def failing_spec(tmp_path: Path) -> Path:
    # value -1 fails in the run (exit 2), oom exits 3, crash dies by SIGSEGV; 2 runs succeed
    return write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "defaults": {"value": 0.5, "sleep": 0.2},
        "vary": {"value": [0.25, -1, 0.75], "oom": [True], "crash": [True]},
    })


def test_failures_are_recorded_with_their_error_and_the_sweep_goes_on(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = failing_spec(tmp_path), tmp_path / "d"
    result = sweep_cli([str(spec), "--dir", str(directory), "--per-device", "2"], sweep_env)
    assert result.returncode == 1, result.stderr  # the sweep finished, but not everything ran ok
    rows = {(r["value"], r["oom"], r["crash"]): r for r in read_db(directory).to_dict("records")}
    assert len(rows) == 5
    for key in ((0.25, False, False), (0.75, False, False)):
        assert rows[key]["_failed"] is False and rows[key]["losses_total_"] == key[0] ** 2
    bad = rows[(-1.0, False, False)]
    assert (bad["_failed"], bad["_failure"], bad["_exit_code"]) == (True, "error", 2)
    assert "--value -1.0 is negative; use a value >= 0" in bad["_exc_txt"]
    oom = rows[(0.5, True, False)]
    assert (oom["_failure"], oom["_exit_code"]) == ("oom", 3)
    assert "out of memory" in oom["_exc_txt"]
    crash = rows[(0.5, False, True)]
    assert (crash["_failure"], crash["_exit_code"]) == ("crash", -11)
    assert "killed by SIGSEGV" in crash["_exc_txt"]
    assert "3 runs failed" in result.stdout
    assert (directory / bad["_log"]).read_text().count("is negative") == 1  # the run's own log


def test_failed_runs_are_skipped_on_resume_unless_retried(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = failing_spec(tmp_path), tmp_path / "d"
    sweep_cli([str(spec), "--dir", str(directory), "--per-device", "2"], sweep_env)
    first = read_db(directory).set_index("_pset_hash")
    assert len(calls(sweep_env)) == 2 * 2 + 3  # start+end of the ok runs, start of the failed

    again = sweep_cli([str(spec), "--dir", str(directory)], sweep_env)
    assert again.returncode == 1
    assert "2 done, 3 failed (skipped; --retry-failed reruns them), 0 to run" in again.stderr
    assert len(calls(sweep_env)) == 7  # nothing ran

    retried = sweep_cli([str(spec), "--dir", str(directory), "--retry-failed"], sweep_env)
    assert retried.returncode == 1
    starts = Counter(c["output"] for c in calls(sweep_env) if c["event"] == "start")
    after = read_db(directory).set_index("_pset_hash")
    assert len(after) == 5  # one row per pset: a retried run replaces its failed row
    for pset_hash, row in after.iterrows():
        expected = 2 if row["_failed"] else 1
        assert starts[str(directory / row["_output"])] == expected, (row["value"], starts)
        rerun = row["_run_id"] != first.loc[pset_hash, "_run_id"]
        assert rerun == bool(row["_failed"])


def test_run_timeout_stops_a_run_and_records_it(tmp_path: Path, sweep_env: dict[str, str]) -> None:
    spec = write_spec(tmp_path / "s.yaml", {"workload": FAKE, "vary": {"sleep": [0.1, 30]}})
    result = sweep_cli([str(spec), "--dir", str(tmp_path / "d"), "--run-timeout", "2"], sweep_env)
    assert result.returncode == 1
    rows = {r["sleep"]: r for r in read_db(tmp_path / "d").to_dict("records")}
    assert rows[0.1]["_failed"] is False
    assert rows[30.0]["_failure"] == "timeout"
    assert "stopped by --run-timeout" in rows[30.0]["_exc_txt"]
    assert rows[30.0]["_pset_runtime"] < 20
