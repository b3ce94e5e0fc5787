"""``workloads report SWEEP_DIR``: contact sheet, CSV/JSON, throughput, scaling scan."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import psweep as ps
import pytest
from PIL import Image

from tests.sweep.conftest import FAKE, REPO, fake_spec, read_db, sweep_cli, write_spec
from tests.workloads.conftest import assert_one_line_error
from workloads.errors import WorkloadError
from workloads.report.sweep_report import render_sweep_report
from workloads.sweep.contact_sheet import CELL_INCHES
from workloads.sweep.results import load_sweep


@pytest.fixture
def star_sweep(tmp_path: Path, sweep_env: dict[str, str]) -> Path:
    """6 runs of the fake workload, 1 of them failed (value -1)."""
    spec = fake_spec(tmp_path, vary={"value": [0.25, 0.5, 1.0, -1], "color": ["red", "green"]})
    result = sweep_cli([str(spec), "--dir", str(tmp_path / "d"), "--per-device", "2"], sweep_env)
    assert result.returncode == 1, result.stderr
    return tmp_path / "d"


def test_report_writes_sheet_explorer_tables_and_throughput(star_sweep: Path,
                                                            sweep_env: dict[str, str]) -> None:
    result = subprocess.run([sys.executable, "-m", "workloads", "report", str(star_sweep)],
                            env=sweep_env, cwd=REPO, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    out = star_sweep / "report"
    names = {Path(line).name for line in result.stdout.split()}
    assert names == {"contact_sheet.png", "explorer.html", "database.csv", "database.json",
                     "summary.json", "summary.md"}
    db = read_db(star_sweep)
    csv = pd.read_csv(out / "database.csv")
    assert len(csv) == len(db) == 5 and set(csv["_pset_id"]) == set(db["_pset_id"])
    as_json = ps.df_read(str(out / "database.json"), fmt="json")  # psweep reads it back
    assert sorted(as_json["_pset_hash"]) == sorted(db["_pset_hash"])
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["runs"], summary["ok"], len(summary["failed"])) == (5, 4, 1)
    assert summary["failed"][0]["failure"] == "error"
    rate = summary["throughput"]["runs_per_hour"]
    assert rate == pytest.approx(3600 * 4 / summary["throughput"]["wall_seconds"])
    assert f"{rate:.1f} runs/hour (2 workers)" in (out / "summary.md").read_text()
    with Image.open(out / "contact_sheet.png") as sheet:
        # two rows (value, colour); the value row has 5 columns: 4 values and the centre 0.5...
        assert sheet.width >= 100 * (4 * CELL_INCHES)
        assert sheet.height > sheet.width / 8


def test_sheet_rows_are_the_scans_through_the_centre(star_sweep: Path) -> None:
    view = load_sweep(star_sweep)
    assert view.varied == ["value", "color"]
    assert view.values["value"] == [-1.0, 0.25, 0.5, 1.0]  # numbers sorted, centre included
    assert view.center == {"value": 0.5, "color": "red"}
    scan = view.scan("color")
    assert [value for value, _ in scan] == ["red", "green"]
    assert all(run is not None and run.params["value"] == 0.5 for _, run in scan)
    failed = dict(view.scan("value"))[-1.0]
    assert failed is not None and failed.failed and failed.image is None


def test_report_of_a_grid_and_of_a_plain_psweep_database(tmp_path: Path,
                                                         sweep_env: dict[str, str]) -> None:
    spec = fake_spec(tmp_path, mode="grid", vary={"value": [0.2, 0.4], "color": ["red", "blue"]})
    assert sweep_cli([str(spec), "--dir", str(tmp_path / "g")], sweep_env).returncode == 0
    view = load_sweep(tmp_path / "g")
    assert len(view.runs) == 4
    assert view.at({"value": 0.4, "color": "blue"}) is not None  # every grid point exists

    # a database written by psweep.run itself (no sweep.yaml): axes inferred from the columns
    plain = tmp_path / "calc"
    params = ps.pgrid([ps.plist("a", [1, 2, 3]), ps.plist("b", ["x"])])
    ps.run(lambda pset: {"result_": pset["a"] * 2}, params, calc_dir=str(plain))
    written = render_sweep_report(plain, tmp_path / "plain-report")
    assert {p.name for p in written} >= {"explorer.html", "database.csv", "summary.json"}
    assert not (tmp_path / "plain-report" / "contact_sheet.png").exists()  # no images
    assert load_sweep(plain).varied == ["a"]


def test_report_of_a_directory_without_database(tmp_path: Path, sweep_env: dict[str, str]) -> None:
    with pytest.raises(WorkloadError, match=r"has no database\.pk"):
        render_sweep_report(tmp_path)
    result = subprocess.run([sys.executable, "-m", "workloads", "report", str(tmp_path / "x")],
                            env=sweep_env, cwd=REPO, capture_output=True, text=True, check=False)
    assert_one_line_error(result, "report", "does not exist")


def test_workers_scan_measures_runs_per_hour_and_speedup(tmp_path: Path,
                                                         sweep_env: dict[str, str]) -> None:
    spec = write_spec(tmp_path / "s.yaml", {"workload": FAKE, "defaults": {"sleep": 0.5},
                                            "vary": {"value": [0.1, 0.2, 0.3, 0.4, 0.5]}})
    directory = tmp_path / "d"
    result = sweep_cli([str(spec), "--dir", str(directory), "--per-device", "2",
                        "--workers-scan", "1,2", "--scan-runs", "4"], sweep_env)
    assert result.returncode == 0, result.stderr
    scaling = json.loads((directory / "scaling.json").read_text())
    steps = scaling["steps"]
    assert [s["workers"] for s in steps] == [1, 2] and all(s["runs"] == 4 for s in steps)
    assert steps[0]["speedup"] == 1.0
    ratio = steps[1]["runs_per_hour"] / steps[0]["runs_per_hour"]
    assert steps[1]["speedup"] == pytest.approx(ratio)
    assert "speedup vs 1" in result.stdout and "runs/hour" in result.stdout
    for step in (1, 2):  # each step ran from scratch in its own psweep directory
        assert len(read_db(directory / "scaling" / f"{step}-workers")) == 4
    assert not (directory / "database.pk").exists()  # the sweep itself is untouched
    # the report of the sweep shows the scan once the sweep has rows
    assert sweep_cli([str(spec), "--dir", str(directory)], sweep_env).returncode == 0
    render_sweep_report(directory)
    assert "| 2 | CPU, CPU |" in (directory / "report" / "summary.md").read_text()
