"""A run directory belongs to one live process: a second attempt neither clears nor shares it.

The second attempt is what SLURM makes of a requeued array task, or an array
script submitted twice by hand: ``workloads sweep --run-one`` for a pset whose
first attempt is still running.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.sweep.conftest import (
    FAKE,
    calls,
    read_db,
    start_sweep,
    sweep_cli,
    wait_until,
    write_spec,
)
from workloads.sweep.expand import expand
from workloads.sweep.lock import claim_run
from workloads.sweep.spec import load_spec


def spec_of(tmp_path: Path, sleep: float) -> Path:
    return write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "output": "out.png", "defaults": {"sleep": sleep},
        "vary": {"value": [0.1, 0.2]},
    })


def test_a_second_attempt_leaves_a_live_run_alone(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = spec_of(tmp_path, sleep=5), tmp_path / "d"
    pset = expand(load_spec(spec))[0]
    first = start_sweep([str(spec), "--dir", str(directory), "--run-one", pset.pset_id],
                        sweep_env, tmp_path / "first.log")
    try:
        wait_until(lambda: any(c["event"] == "start" for c in calls(sweep_env)), 120,
                   "the first attempt's run to start")
        before = sorted(p.name for p in (directory / pset.pset_id).iterdir())
        second = sweep_cli([str(spec), "--dir", str(directory), "--run-one", pset.pset_id],
                           sweep_env)
        assert second.returncode == 2, second.stderr
        errors = [line for line in second.stderr.splitlines() if "error:" in line]
        assert len(errors) == 1 and "Traceback" not in second.stderr, second.stderr
        assert f"run {pset.pset_id} is still live in another process (pid " in errors[0]
        assert sorted(p.name for p in (directory / pset.pset_id).iterdir()) == before
        assert first.wait(timeout=120) == 0, (tmp_path / "first.log").read_text()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert [c["event"] for c in calls(sweep_env)] == ["start", "end"]  # one attempt ran
    assert len(read_db(directory)) == 1


def test_a_claim_held_elsewhere_keeps_the_directory_and_the_local_sweep_goes_on(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = spec_of(tmp_path, sleep=0.1), tmp_path / "d"
    busy = expand(load_spec(spec))[1]
    (directory / busy.pset_id).mkdir(parents=True)
    (directory / busy.pset_id / "partial.bin").write_bytes(b"a live run's file")
    claim = claim_run(directory / busy.pset_id)  # as the live process would hold it
    try:
        result = sweep_cli([str(spec), "--dir", str(directory)], sweep_env)
    finally:
        os.close(claim)
    assert result.returncode == 1, result.stderr  # one run not run: not all done
    assert "is still live in another process" in " ".join(result.stderr.split())
    assert (directory / busy.pset_id / "partial.bin").read_bytes() == b"a live run's file"
    assert list(read_db(directory)["_pset_id"]) != [busy.pset_id] and len(read_db(directory)) == 1
    again = sweep_cli([str(spec), "--dir", str(directory)], sweep_env)  # the claim released
    assert again.returncode == 0, again.stderr
    assert len(read_db(directory)) == 2
