"""Helpers for the sweep tests: specs on disk, real sweep processes, their databases.

Sweeps run as real ``python -m workloads sweep`` processes, with real run
processes under them; most use ``tests.sweep.fake_workload`` (no framework, so a
run costs a fraction of a second), the end-to-end test the real ``style``.
``CUDA_VISIBLE_DEVICES=''`` makes every sweep here use CPU workers; the slot test
sets it to fake GPU ids, which the sweep hands on without touching a GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import psweep as ps
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FAKE = "tests.sweep.fake_workload"


@pytest.fixture
def sweep_env(tmp_path: Path) -> dict[str, str]:
    """Environment for sweep processes: CPU workers, a calls log, results under tmp."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["FAKE_CALLS_LOG"] = str(tmp_path / "calls.jsonl")
    env["WORKLOADS_RESULTS"] = str(tmp_path / "results")
    env.pop("WORKLOADS_SWEEP_RUN_ID", None)
    env.pop("KERAS_BACKEND", None)
    return env


def write_spec(path: Path, spec: dict[str, Any] | str) -> Path:
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False))
    return path


def fake_spec(tmp_path: Path, name: str = "spec.yaml", **overrides: Any) -> Path:
    """A star sweep of the fake workload: value x4 and colour x3 -> 6 runs (centre once)."""
    spec: dict[str, Any] = {
        "workload": FAKE,
        "mode": "star",
        "output": "out.png",
        "defaults": {"value": 0.5, "sleep": 0.2},
        "vary": {"value": [0.25, 0.5, 0.75, 1.0], "color": ["red", "green", "blue"]},
    }
    spec.update(overrides)
    return write_spec(tmp_path / name, spec)


def sweep_cli(
    args: list[str], env: dict[str, str], timeout: float = 120, umask: int = -1
) -> subprocess.CompletedProcess[str]:
    """``workloads sweep ARGS`` in a child; `umask` is the child's alone (-1: this one's)."""
    return subprocess.run(
        [sys.executable, "-m", "workloads", "sweep", *args],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False,
        umask=umask,
    )


def start_sweep(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A sweep in the background, its output in ``log`` (the test stops it)."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "workloads", "sweep", *args],
            env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
        )


def read_db(directory: Path) -> pd.DataFrame:
    path = directory / "database.pk"
    return ps.df_read(str(path)) if path.exists() else pd.DataFrame()


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def calls(env: dict[str, str]) -> list[dict[str, Any]]:
    """Start/end events written by every fake run, in order."""
    path = Path(env["FAKE_CALLS_LOG"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class StreamedSweep:
    """A sweep in the background, its output read through a pipe as it comes.

    A pipe, not a log file: the disk-full tests fill the disk (or the file-size limit)
    that a log file would be written to. `argv` replaces `python -m workloads sweep`
    (a wrapper that sets a limit first, say).
    """

    def __init__(self, args: list[str], env: dict[str, str],
                 argv: list[str] | None = None) -> None:
        self.process = subprocess.Popen(
            [*(argv or [sys.executable, "-m", "workloads", "sweep"]), *args], env=env, cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    @property
    def words(self) -> str:
        """The output with rich's line wrapping undone."""
        return " ".join(self.text.split())

    def wait(self) -> int:
        code = self.process.wait(timeout=120)
        self._reader.join(timeout=30)
        return code
