"""Device slots: each run sees exactly its device, and no device runs more than K at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sweep.conftest import FAKE, read_db, sweep_cli, write_spec
from workloads.errors import WorkloadError
from workloads.sweep.slots import build_slots, describe, parse_devices, visible_gpus

GPUS = [("GPU 0", "GPU-aaa"), ("GPU 1", "GPU-bbb"), ("GPU 2", "GPU-ccc")]


def test_slots_go_round_robin_so_the_first_n_span_n_devices() -> None:
    slots = build_slots([0, 2], 2, GPUS)
    assert [(s.index, s.visible) for s in slots] == [
        (0, "GPU-aaa"), (1, "GPU-ccc"), (2, "GPU-aaa"), (3, "GPU-ccc")]
    assert describe(slots) == "4 workers: GPU 0 x2, GPU 2 x2"


def test_all_means_every_visible_gpu_and_none_means_cpu_workers() -> None:
    assert [s.visible for s in build_slots("all", 1, GPUS)] == ["GPU-aaa", "GPU-bbb", "GPU-ccc"]
    cpu = build_slots("all", 2, [], cpu_count=8)
    assert [(s.label, s.visible, s.cpu_threads) for s in cpu] == [("CPU", "", 4), ("CPU", "", 4)]
    assert build_slots("cpu", 1, GPUS, cpu_count=8)[0].visible == ""  # GPUs hidden on request


def test_slot_environment_binds_the_device_before_the_run_starts() -> None:
    base = {"CUDA_VISIBLE_DEVICES": "0,1,2", "PATH": "/bin"}
    gpu = build_slots([1], 2, GPUS)[0].environ(base)
    assert gpu["CUDA_VISIBLE_DEVICES"] == "GPU-bbb"
    assert gpu["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"  # shared GPU: no up-front allocation
    assert gpu["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    alone = build_slots([1], 1, GPUS)[0].environ(base)
    assert "TF_FORCE_GPU_ALLOW_GROWTH" not in alone
    cpu = build_slots("cpu", 2, GPUS, cpu_count=2)[1].environ(base)
    assert cpu["CUDA_VISIBLE_DEVICES"] == ""
    assert cpu["TF_NUM_INTRAOP_THREADS"] == "1"
    assert base["CUDA_VISIBLE_DEVICES"] == "0,1,2"  # the sweep's own environment is untouched


def test_existing_cuda_visible_devices_is_the_truth() -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}) == [("GPU 0", "3"), ("GPU 1", "5")]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2,-1,4"}) == [("GPU 0", "2")]  # CUDA stops at -1


@pytest.mark.parametrize(
    ("devices", "gpus", "fragment"),
    [
        ([5], GPUS, "GPU 5 does not exist: 3 visible (0..2)"),
        ([0], [], "no GPU is visible"),
    ],
)
def test_impossible_device_choices(devices: list[int], gpus: list[tuple[str, str]],
                                   fragment: str) -> None:
    with pytest.raises(WorkloadError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        build_slots(devices, 1, gpus)


def test_parse_devices() -> None:
    assert parse_devices("0, 1,3") == [0, 1, 3]
    assert parse_devices("ALL") == "all" and parse_devices("cpu") == "cpu"
    with pytest.raises(WorkloadError, match="repeated"):
        parse_devices("1,1")


def test_each_run_sees_exactly_its_device_and_no_device_is_oversubscribed(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    """A real sweep over two (pretend) GPUs, two runs each: the runs report what they saw."""
    spec = write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "defaults": {"sleep": 0.6},
        "vary": {"value": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]},
    })
    env = {**sweep_env, "CUDA_VISIBLE_DEVICES": "3,5"}  # ids handed on verbatim, never opened
    result = sweep_cli([str(spec), "--dir", str(tmp_path / "d"), "--per-device", "2"], env)
    assert result.returncode == 0, result.stderr
    rows = read_db(tmp_path / "d").to_dict("records")
    assert len(rows) == 8
    device_of_slot = {0: "3", 1: "5", 2: "3", 3: "5"}
    for row in rows:
        assert row["visible_devices_"] == device_of_slot[row["_slot"]]
        assert int(row["slot_"]) == row["_slot"]
    assert {row["_slot"] for row in rows} == {0, 1, 2, 3}
    for device in ("3", "5"):
        spans = [(r["began_"], r["ended_"]) for r in rows if r["visible_devices_"] == device]
        for began, _ in spans:
            overlapping = sum(1 for b, e in spans if b <= began < e)
            assert overlapping <= 2, f"GPU {device} ran {overlapping} runs at once"
