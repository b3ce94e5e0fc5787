"""``workloads check`` on a host without GPUs, and the compute-capability rule."""

from __future__ import annotations

import json

import pytest

from tests.workloads.conftest import assert_one_line_error, run_cli
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
