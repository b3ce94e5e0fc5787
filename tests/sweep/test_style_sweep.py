"""The issue's "done when", with the real style transfer: kill, restart, report.

Three runs of ``workloads style --weights random --width 48 --iterations 10`` (a
star over the learning rate) on two CPU workers. The sweep process is killed
with SIGKILL after its first finished run; the restarted sweep must run exactly
the runs without a row, and ``workloads report`` must draw the results.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from PIL import Image

from tests.sweep.conftest import REPO, read_db, start_sweep, sweep_cli, wait_until, write_spec
from workloads.sweep.expand import expand
from workloads.sweep.spec import load_spec


@pytest.mark.slow
def test_style_sweep_survives_a_kill_and_reports(tmp_path: Path, sweep_env: dict[str, str]) -> None:
    spec = write_spec(tmp_path / "lr.yaml", {
        "workload": "style", "mode": "star",
        "defaults": {"weights": "random", "width": 48, "iterations": 10},
        "vary": {"learning_rate": [1, 10, 30]},
    })
    directory = tmp_path / "sweep"
    args = [str(spec), "--dir", str(directory), "--devices", "cpu", "--per-device", "2"]
    first = start_sweep(args, sweep_env, tmp_path / "first.log")
    try:
        wait_until(lambda: len(read_db(directory)) >= 1, 150, "the first style run")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    killed_at = time.time()
    before = read_db(directory)
    assert "2 workers: CPU x2" in (tmp_path / "first.log").read_text()

    resumed = sweep_cli(args, sweep_env, timeout=200)
    assert resumed.returncode == 0, resumed.stderr
    after = read_db(directory)
    plan = expand(load_spec(spec))
    assert len(after) == 3 and set(after["_pset_hash"]) == {p.pset_hash for p in plan}
    assert not after["_failed"].any()
    # the runs done before the kill were not run again: same rows, records untouched since
    for _, row in after[after["_pset_hash"].isin(before["_pset_hash"])].iterrows():
        assert row["_run_id"] == before["_run_id"].iloc[0]
        assert (directory / row["_record"]).stat().st_mtime < killed_at
    started = {int(i) for i in re.findall(r"start \[(\d+)\]", resumed.stderr)}
    adopted = resumed.stderr.count("adopted run")
    done_before = {p.index for p in plan if p.pset_hash in set(before["_pset_hash"])}
    assert not started & done_before and len(started) + adopted + len(done_before) == 3
    for _, row in after.iterrows():  # each row holds the real run's results
        record = json.loads((directory / row["_record"]).read_text())
        assert record["learning_rate"] == row["learning_rate"]
        assert row["last_loss_total_"] == record["last_loss"]["total"]
        assert row["iterations_per_sec_"] > 0 and row["device_"] == "CPU"
        assert row["_device"] == "CPU" or row["_adopted"] is True  # adopted: slot unknown

    report = subprocess.run([sys.executable, "-m", "workloads", "report", str(directory)],
                            env=sweep_env, cwd=REPO, capture_output=True, text=True, check=False)
    assert report.returncode == 0, report.stderr
    out = directory / "report"
    assert len(pd.read_csv(out / "database.csv")) == 3
    with Image.open(out / "contact_sheet.png") as sheet:
        assert sheet.format == "PNG" and sheet.width > 300
    page = (out / "explorer.html").read_text()
    assert page.count("data:image/png;base64,") == 3  # every result inside the one file
    assert '"name":"learning_rate"' in page and "runs/hour" in page
