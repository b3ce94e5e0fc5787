"""``workloads accept`` end to end on this machine's CPU, with TensorFlow and with JAX.

One ``--quick`` run per backend, shared by the assertions (module-scoped), so the
suite pays for each battery once. The peak cache is empty: a CPU has no datasheet,
so every measured row is a figure (``info``) and the run must exit 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.workloads.conftest import REPO

pytestmark = pytest.mark.slow


@dataclass
class Run:
    result: subprocess.CompletedProcess[str]
    record: dict[str, Any]
    path: Path


def _accept(tmp: Path, backend: str, *args: str) -> Run:
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    env.update(
        WORKLOADS_CACHE=str(tmp / "cache"),
        WORKLOADS_PEAK_CACHE=str(tmp / "peak-flops.json"),
        WORKLOADS_RESULTS=str(tmp / "results"),
        CUDA_VISIBLE_DEVICES="",
        KERAS_BACKEND=backend,
        PATH=f"{os.path.dirname(sys.executable)}:/usr/bin:/bin",  # no dcgmi here
    )
    path = tmp / "accept.json"
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "accept", "--quick", "--output", str(path), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    record = json.loads(path.read_text()) if path.exists() else {}
    return Run(result, record, path)


@pytest.fixture(scope="module")
def tensorflow_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _accept(tmp_path_factory.mktemp("accept-tf"), "tensorflow", "--soak", "3")


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    # Training is the slow part on JAX's CPU backend and the TensorFlow run covers it.
    return _accept(
        tmp_path_factory.mktemp("accept-jax"),
        "jax",
        "--only",
        "matmul",
        "membw",
        "transfer",
        "allreduce",
        "p2p",
        "nvml",
        "dcgm",
        "--soak",
        "2",
    )


def _rows(run: Run, check: str) -> list[dict[str, Any]]:
    return [f for f in run.record["findings"] if f["check"] == check]


def test_the_cpu_battery_runs_every_check_and_exits_0(tensorflow_run: Run) -> None:
    run = tensorflow_run
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    record = run.record
    assert record["workload"] == "accept" and record["status"] == "done"
    assert record["mode"] == "quick" and record["backend"] == "tensorflow"
    assert record["env"]["cpu"] and record["exit_code"] == 0
    assert record["reference_documents"]["h100-datasheet"]["date"] == "2023-09"
    assert {f["check"] for f in record["findings"]} == {
        "matmul",
        "membw",
        "transfer",
        "allreduce",
        "p2p",
        "training",
        "nvml",
        "errors",
        "dcgm",
        "soak",
        "host",
    }
    assert {f["verdict"] for f in record["findings"]} <= {"info", "skip", "pass", "warn"}
    assert record["verdict"] in ("pass", "warn")
    assert set(record["durations_s"]) == {
        "matmul",
        "membw",
        "transfer",
        "allreduce",
        "p2p",
        "training",
        "dcgm",
        "soak",
    }
    assert record["profile"] == "standard" and record["soak_s"] == 3
    log = (run.path.parent / "records.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["started_at"] == record["started_at"]


def test_cpu_rows_are_figures_without_a_datasheet(tensorflow_run: Run) -> None:
    matmul = {f["item"].split()[0]: f for f in _rows(tensorflow_run, "matmul")}
    assert set(matmul) == {"float32", "bfloat16"}
    for row in matmul.values():
        assert row["verdict"] == "info" and row["value"] > 0 and row["unit"] == "GFLOP/s"
        assert "no datasheet for CPUs" in row["reason"]
    [membw] = _rows(tensorflow_run, "membw")
    assert membw["value"] > 0 and membw["unit"] == "GB/s" and membw["verdict"] == "info"
    [transfer] = _rows(tensorflow_run, "transfer")
    assert transfer["verdict"] == "skip" and transfer["value"] is None
    assert transfer["reason"] == "no PCIe link on a CPU device: nothing to measure"
    [dcgm] = _rows(tensorflow_run, "dcgm")
    assert dcgm["verdict"] == "skip" and "not installed" in dcgm["reason"]


def test_the_allreduce_reports_nccl_tests_figures(tensorflow_run: Run) -> None:
    rows = _rows(tensorflow_run, "allreduce")
    sizes = [r for r in rows if r["item"].endswith("MiB")]
    assert [r["item"] for r in sizes] == ["1 MiB", "4 MiB"]
    for row in sizes:
        d = row["details"]
        assert d["ranks"] == 2 and d["algbw_gbps"] > 0
        assert d["algbw_gbps"] == pytest.approx(d["bytes_per_rank"] / d["seconds"] / 1e9)
        assert d["busbw_gbps"] == pytest.approx(d["algbw_gbps"] * 2 * (2 - 1) / 2)
    assert rows[-1]["item"] == "best busbw" and rows[-1]["value"] == max(r["value"] for r in sizes)


def test_the_pair_matrix_runs_over_the_logical_cpu_devices(tensorflow_run: Run) -> None:
    [row] = _rows(tensorflow_run, "p2p")
    d = row["details"]
    assert row["device"] == "CPU devices ×2" and row["verdict"] == "info"
    assert d["labels"] == ["CPU device 0", "CPU device 1"]
    assert d["gbps"][0][0] is None and d["gbps"][0][1] > 0 and d["gbps"][1][0] > 0
    assert "p2p: GB/s, from row to column" in tensorflow_run.result.stdout


def test_the_soak_checks_every_product(tensorflow_run: Run) -> None:
    row, memory = _rows(tensorflow_run, "soak")
    assert row["verdict"] == "pass" and row["device"] == "CPU"
    assert row["details"]["iterations"] > 1 and row["details"]["mismatches"] == 0
    # The memory coverage: the CPU backend's fixed fill, read back once per iteration.
    assert memory["item"] == "memory" and memory["verdict"] == "pass"
    assert memory["details"]["passes"] == row["details"]["iterations"]
    assert memory["details"]["mismatches"] == 0 and memory["details"]["filled_bytes"] > 0
    assert memory["reason"].startswith("memory: 4.0 MiB written and read back")


def test_the_training_row_states_its_mfu_and_peak(tensorflow_run: Run) -> None:
    [row] = _rows(tensorflow_run, "training")
    d = row["details"]
    assert d["model"] == "cnn" and d["examples_per_sec"] > 0 and d["flops_per_example"] > 0
    assert d["peak"]["source"] in ("measured", "provisional") and d["peak"]["measured_at"]
    assert d["mfu"] == pytest.approx(d["achieved_flops"] / d["peak"]["value"])
    assert "MFU" in row["reason"]


def test_the_table_is_printed_with_every_row(tensorflow_run: Run) -> None:
    out = tensorflow_run.result.stdout
    assert "workloads accept (quick, tensorflow)" in out
    assert "no PCIe link on a CPU device" in out and f"record: {tensorflow_run.path}" in out
    assert "Traceback" not in tensorflow_run.result.stderr
    summary = out.rstrip().splitlines()[-2]  # the last line names the record
    assert summary.startswith(("PASS: ", "WARN: ")), summary


def test_the_same_battery_runs_on_jax(jax_run: Run) -> None:
    run = jax_run
    assert run.result.returncode == 0, run.result.stderr[-3000:]
    assert run.record["backend"] == "jax"
    assert run.record["checks_selected"] == [
        "matmul",
        "membw",
        "transfer",
        "allreduce",
        "p2p",
        "nvml",
        "dcgm",
        "soak",
    ]
    [pairs] = _rows(run, "p2p")
    assert pairs["details"]["gbps"][1][0] > 0
    soaked, memory = _rows(run, "soak")
    assert soaked["verdict"] == "pass" and soaked["details"]["iterations"] > 1
    assert memory["item"] == "memory" and memory["verdict"] == "pass"
    assert memory["details"]["passes"] == soaked["details"]["iterations"]
    assert all(r["value"] > 0 for r in _rows(run, "matmul"))
    sizes = [r for r in _rows(run, "allreduce") if r["item"].endswith("MiB")]
    assert sizes and all(r["details"]["ranks"] == 2 for r in sizes)
    assert not _rows(run, "training")


def _nvml_sees_a_gpu() -> bool:
    from workloads.envinfo import nvml_gpus

    return bool(nvml_gpus()[1])


@pytest.mark.gpu
def test_the_gpu_battery_judges_real_gpus(tmp_path: Path) -> None:
    """On a GPU host (with TensorFlow or, as KERAS_BACKEND says, JAX): every row has its limit."""
    if not _nvml_sees_a_gpu():
        pytest.skip("no NVIDIA GPU visible through NVML")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update(WORKLOADS_PEAK_CACHE=str(tmp_path / "peaks.json"),
               WORKLOADS_RESULTS=str(tmp_path / "results"))
    path = tmp_path / "accept.json"
    result = subprocess.run(
        [sys.executable, "-m", "workloads", "accept", "--quick", "--output", str(path)],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=900, check=False,
    )
    assert result.returncode in (0, 1), result.stderr[-3000:]  # a real GPU may fail a check
    record = json.loads(path.read_text())
    assert record["exit_code"] == result.returncode
    assert record["devices"] and all(d["label"].startswith("GPU") for d in record["devices"])
    rows = record["findings"]
    known = {d["label"] for d in record["devices"] if d["model"]}
    for row in rows:
        if row["check"] in ("matmul", "membw") and row["device"] in known:
            assert row["limit"] and row["verdict"] in ("pass", "warn", "fail"), row
    links = [r for r in rows if r["check"] == "nvml" and r["item"] == "PCIe link"]
    assert links and all(r["verdict"] != "skip" for r in links)
    [training] = [r for r in rows if r["check"] == "training"]
    assert training["details"]["model"] == "resnet50v2" and training["details"]["mfu"] > 0
