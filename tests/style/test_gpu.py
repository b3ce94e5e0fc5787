"""On a GPU host: the style step runs on the GPU (skipped where NVML sees no GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.cli import main
from workloads.style.memory import visible_gpu_free_bytes


@pytest.mark.gpu
def test_style_runs_on_the_gpu_with_xla(tmp_path: Path) -> None:
    if visible_gpu_free_bytes() is None:
        pytest.skip("no NVIDIA GPU visible through NVML")
    output = tmp_path / "gpu.png"
    argv = ["style", "--weights", "random", "--width", "256", "--iterations", "30", "--xla"]
    assert main([*argv, "--output", str(output)]) == 0
    record = json.loads(output.with_suffix(".json").read_text())
    assert record["device"].startswith("GPU"), record["device"]
    totals = record["loss_history"]["total"]
    assert totals[-1] < totals[0] and record["iterations_per_sec"] > 0
