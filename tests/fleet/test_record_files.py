"""A run directory's `<host>.json` that is no plain file: its host fails, the rest are judged.

A FIFO left by a script that was to stream a record, a directory, a link that leads
nowhere or in a loop: none holds a record. Each fails its host in one line, the other
hosts are judged, and nothing blocks (a FIFO nobody writes to would hold a plain read
forever: the report runs in a child process with a wall-clock bound, so a hang fails
this test rather than the suite). A link to a real record is read as the record.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from workloads.fleet.synthetic import synthetic_record

ROOT = Path(__file__).resolve().parents[2]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _directory(path: Path) -> None:
    path.mkdir()


def _dangling(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere.json")


def _loop(path: Path) -> None:
    path.symlink_to(path)


@pytest.mark.parametrize("make", [_fifo, _directory, _dangling, _loop],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_record_that_is_no_file_fails_its_host_only(tmp_path: Path,
                                                      make: Callable[[Path], None]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for i in range(3):
        (run / f"ok{i}.json").write_text(json.dumps(
            synthetic_record(f"ok{i}", 2, random.Random(i), noise=0.01)))
    make(run / "odd.json")
    try:
        done = subprocess.run([sys.executable, "-m", "workloads", "report", "--fleet", str(run)],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the report blocked on odd.json")
    assert done.returncode in (0, 1), done.stderr
    hosts = {h["host"]: h for h in json.loads((run / "report" / "fleet.json").read_text())
             ["hosts"]}
    assert hosts["odd"]["verdict"] == "fail" and len(hosts["odd"]["reasons"]) == 1
    assert "odd.json cannot be read" in hosts["odd"]["reasons"][0]
    assert {hosts[f"ok{i}"]["verdict"] for i in range(3)} == {"pass"}

