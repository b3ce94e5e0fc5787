"""``workloads check`` on a host without GPUs, and the compute-capability rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workloads.conftest import REPO, assert_one_line_error, run_cli
from workloads.devices import Gpu, require_supported
from workloads.errors import WorkloadError


def test_check_runs_the_matmul_on_the_cpu(isolated_env: dict[str, str]) -> None:
    result = run_cli(["check", "--json"], isolated_env)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["gpus"] == [] and report["ok"] is True
    assert report["matmul"][0]["device"] == "/CPU:0"
    assert report["matmul"][0]["max_rel_error"] < 1e-4
    assert "no GPU visible: the matmul ran on the CPU" in result.stderr
    peaks = report["peak_flops"][0]
    assert peaks["device"] == "/CPU:0" and peaks["float32"] > 0 and peaks["bfloat16"] > 0
    cache = json.loads(Path(isolated_env["WORKLOADS_PEAK_CACHE"]).read_text())
    assert {entry["dtype"] for entry in cache.values()} == {"float32", "bfloat16"}


def test_check_json_document_comes_before_the_note_in_a_merged_stream(
    isolated_env: dict[str, str],
) -> None:
    """``check --json 2>&1``: the note follows the whole document, never lands inside it.

    Block-buffered stdout, as in a container or a pipe: without an explicit flush the
    document would only leave at exit, after (or around) the note.
    """
    env = {k: v for k, v in isolated_env.items() if k != "PYTHONUNBUFFERED"}
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "check", "--json"],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout
    text = result.stdout
    start, end = text.index("{"), text.rindex("}") + 1
    assert json.loads(text[start:end])["ok"] is True
    assert text.index("no GPU visible: the matmul ran on the CPU") > end, text


def test_require_gpu_fails_without_one(isolated_env: dict[str, str]) -> None:
    result = run_cli(["check", "--require-gpu"], isolated_env)
    assert result.returncode == 2
    assert_one_line_error(result, "check", "no GPU is visible to TensorFlow", "nvidia-smi")


def test_old_gpus_are_named() -> None:
    gpus = [
        Gpu(0, "NVIDIA H100", (9, 0), "/physical_device:GPU:0"),
        Gpu(1, "Tesla K80", (3, 7), "/physical_device:GPU:1"),
    ]
    with pytest.raises(WorkloadError, match=r"GPU 1 Tesla K80 \(compute capability 3.7\)"):
        require_supported(gpus)
    require_supported(gpus[:1])
