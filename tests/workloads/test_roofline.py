"""FLOPs counted from the model match a hand count; the peak is measured once and cached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workloads import busy, roofline


class RecordedProbe:
    """A load probe that reports recorded readings, one per measurement."""

    def __init__(self, *readings: busy.LoadReading) -> None:
        self.readings = list(readings)

    def start(self) -> None:
        return None

    def stop(self, token: None) -> busy.LoadReading:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


IDLE = busy.LoadReading(others_cpu_share=0.01, load_average=0.3, gpu_other_processes=None)
# What the issue saw: the first peak measured while the test suite ran (load 2.9).
SUITE_RUNNING = busy.LoadReading(others_cpu_share=0.62, load_average=2.9, gpu_other_processes=None)


@pytest.fixture(autouse=True)
def idle_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Measurements in these tests are judged against recorded load, not the CI machine's."""
    monkeypatch.setattr(roofline, "load_probe", lambda: RecordedProbe(IDLE))


def sparse_loss() -> Any:
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_dense_flops_match_the_hand_count() -> None:
    """64 -> 32 -> 10. Per example: each matmul 2*m*n forward and 2*m*n for its weight
    gradient; only the second layer also needs its input gradient (the input is data).
    Bias adds, their gradients and the softmax loss are a few dozen more."""
    import keras

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32), keras.layers.Dense(10)])
    per_example, method = roofline.flops_per_example(model, sparse_loss(), batch=8)
    hand = 2 * (2 * 64 * 32) + 3 * (2 * 32 * 10)
    assert method == "tensorflow registered op flops"
    assert per_example == pytest.approx(hand, rel=0.03)
    assert per_example > hand  # the small ops are counted too, never fewer than the matmuls


def test_conv_flops_match_the_hand_count() -> None:
    """3x3 conv, 3 -> 8 channels, 'same' on 8x8: 2*8*8*8*(3*3*3) forward, as much for the
    kernel gradient, no input gradient; then Dense 512 -> 10 three times."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.Conv2D(8, 3, padding="same"),
            keras.layers.Flatten(),
            keras.layers.Dense(10),
        ]
    )
    per_example, _ = roofline.flops_per_example(model, sparse_loss(), batch=4)
    conv = 2 * 8 * 8 * 8 * 3 * 3 * 3
    hand = 2 * conv + 3 * (2 * 512 * 10)
    assert per_example == pytest.approx(hand, rel=0.03)


def test_peak_is_measured_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path))
    monkeypatch.delenv("WORKLOADS_PEAK_CACHE", raising=False)  # the default place is tested
    calls: list[str] = []

    def fake_rate(dtype: str) -> float:
        calls.append(dtype)
        return 1.5e11

    monkeypatch.setattr(roofline, "matmul_rate", fake_rate)
    first = roofline.peak_flops("Test CPU", "float32")
    second = roofline.peak_flops("Test CPU", "float32")
    assert calls == ["float32"]
    assert first["flops"] == second["flops"] == 1.5e11
    assert (first["cached"], second["cached"]) == (False, True)
    cache = json.loads((tmp_path / "peak-flops.json").read_text())
    assert cache["tensorflow|Test CPU|float32"]["flops"] == 1.5e11
    roofline.peak_flops("Test CPU", "bfloat16")
    assert calls == ["float32", "bfloat16"]


def test_matmul_rate_is_a_real_measurement() -> None:
    rate = roofline.matmul_rate("float32", size=128, repeats=2, rounds=1)
    assert rate > 0


def test_mfu() -> None:
    assert roofline.mfu(100.0, 1e6, 1e9) == pytest.approx(0.1)
    assert roofline.mfu(100.0, 0.0, 1e9) is None


def test_a_remeasured_peak_only_replaces_a_lower_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy device measures too low, never too high: the best figure seen is kept."""
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    rates = iter([1.0e11, 0.4e11, 2.0e11])
    monkeypatch.setattr(roofline, "matmul_rate", lambda dtype: next(rates))
    assert roofline.peak_flops("Test CPU", "float32")["flops"] == 1.0e11
    assert roofline.peak_flops("Test CPU", "float32", refresh=True)["flops"] == 1.0e11
    assert roofline.peak_flops("Test CPU", "float32", refresh=True)["flops"] == 2.0e11
    assert roofline.peak_flops("Test CPU", "float32")["flops"] == 2.0e11


def test_an_mfu_above_one_says_the_peak_was_measured_under_load() -> None:
    note = roofline.peak_note(1.94, {"flops": 1.2e10, "load_average": 25.6})
    assert note is not None and "194%" in note and "load average 25.6" in note
    assert "workloads check --refresh-peak" in note
    assert roofline.peak_note(0.5, {"flops": 1.2e10}) is None


def test_a_peak_measured_while_busy_is_provisional_and_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's case: 58.7 GFLOP/s under load 2.9, 106 idle. The busy figure is used
    only as provisional, never cached for good, and the idle one replaces it."""
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    probe = RecordedProbe(SUITE_RUNNING, IDLE)
    monkeypatch.setattr(roofline, "load_probe", lambda: probe)
    rates = iter([58.7e9, 106e9])
    monkeypatch.setattr(roofline, "matmul_rate", lambda dtype: next(rates))
    first = roofline.peak_flops("Test CPU", "bfloat16")
    assert first["flops"] == 58.7e9 and first["provisional"] is True
    assert "other processes used 62% of the CPU time" in first["busy_reason"]
    second = roofline.peak_flops("Test CPU", "bfloat16")  # no --refresh-peak needed
    assert second["flops"] == 106e9 and second["provisional"] is False
    assert roofline.peak_flops("Test CPU", "bfloat16")["cached"] is True  # idle: kept


def test_a_peak_cached_before_the_load_check_is_measured_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cache written before measurements were checked for other load holds busy figures
    as if idle (44.5 GFLOP/s at load 9.9 on a 400 GFLOP/s CPU: MFU 199 %). Such an entry
    is measured again, and an idle measurement replaces it even when it is lower."""
    cache = tmp_path / "peaks.json"
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(cache))
    cache.write_text(json.dumps({"tensorflow|Test CPU|bfloat16": {
        "flops": 44.5e9, "dtype": "bfloat16", "device": "Test CPU", "backend": "tensorflow",
        "matrix": 2048, "measured_at": "2026-11-25T10:25:04Z", "load_average": 9.9}}))
    probe = RecordedProbe(IDLE, IDLE)
    monkeypatch.setattr(roofline, "load_probe", lambda: probe)
    monkeypatch.setattr(roofline, "matmul_rate", lambda dtype: 401e9)
    peak = roofline.peak_flops("Test CPU", "bfloat16")
    assert (peak["flops"], peak["provisional"], peak["cached"]) == (401e9, False, False)
    assert roofline.mfu_peak("Test CPU", "bfloat16")["source"] == "measured"


def test_an_idle_peak_is_never_replaced_by_a_busy_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    probe = RecordedProbe(IDLE, SUITE_RUNNING)
    monkeypatch.setattr(roofline, "load_probe", lambda: probe)
    rates = iter([100e9, 130e9])  # a busy figure can even read high (turbo, a lucky round)
    monkeypatch.setattr(roofline, "matmul_rate", lambda dtype: next(rates))
    roofline.peak_flops("Test CPU", "float32")
    kept = roofline.peak_flops("Test CPU", "float32", refresh=True)
    assert kept["flops"] == 100e9 and kept["provisional"] is False


@pytest.mark.parametrize(
    ("old", "new", "keep"),
    [
        (None, {"flops": 1.0, "provisional": True}, "new"),
        ({"flops": 2.0, "provisional": False}, {"flops": 3.0, "provisional": False}, "new"),
        ({"flops": 2.0, "provisional": False}, {"flops": 1.0, "provisional": False}, "old"),
        ({"flops": 2.0, "provisional": True}, {"flops": 1.0, "provisional": False}, "new"),
        ({"flops": 2.0, "provisional": False}, {"flops": 9.0, "provisional": True}, "old"),
        ({"flops": 2.0, "provisional": True}, {"flops": 3.0, "provisional": True}, "new"),
        # an entry cached before the load check: nothing says it was idle
        ({"flops": 2.0}, {"flops": 1.0, "provisional": False}, "new"),
        ({"flops": 2.0}, {"flops": 3.0, "provisional": True}, "new"),
        ({"flops": 2.0}, {"flops": 1.0, "provisional": True}, "old"),
    ],
)
def test_which_peak_is_kept(old: dict | None, new: dict, keep: str) -> None:
    assert roofline.better_peak(old, new) is (new if keep == "new" else old)


def test_others_share_leaves_out_this_process() -> None:
    before = busy.CpuTimes(busy_s=100.0, total_s=1000.0, own_s=10.0)
    after = busy.CpuTimes(busy_s=118.0, total_s=1020.0, own_s=26.0)  # 16 s of the 18 were ours
    assert busy.others_share(before, after) == pytest.approx(0.1)
    assert busy.busy_reason(busy.LoadReading(0.1, 1.0, None)) is None  # at the line: idle
    assert busy.busy_reason(busy.LoadReading(0.2, 1.0, 0)) is not None
    assert busy.busy_reason(busy.LoadReading(0.0, 0.1, 2)) == "2 other process(es) on the GPUs"
    assert busy.others_share(None, after) is None


def test_cpu_times_reads_proc_stat(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n")
    times = busy.cpu_times(stat)
    assert times is not None
    hz = __import__("os").sysconf("SC_CLK_TCK")
    assert times.busy_s == pytest.approx(150 / hz) and times.total_s == pytest.approx(1000 / hz)
    assert busy.cpu_times(tmp_path / "missing") is None


def test_a_gpu_in_the_reference_table_is_divided_by_its_datasheet_peak(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The field's MFU: achieved over the datasheet's dense peak, the measured one beside it."""
    from workloads import envinfo

    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    monkeypatch.setattr(roofline, "matmul_rate", lambda dtype: 700e12)
    h100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "pci_device_id": 0x2330}
    monkeypatch.setattr(envinfo, "nvml_gpus", lambda: ("570.86", [h100]))
    peak = roofline.mfu_peak("NVIDIA H100 80GB HBM3", "float16")
    assert peak["source"] == "datasheet" and peak["value"] == 989.5e12
    assert peak["document"].startswith("H100 SXM5 80GB: NVIDIA H100 Tensor Core GPU datasheet")
    assert peak["measured"]["value"] == 700e12 and peak["measured_at"]
    other = roofline.mfu_peak("Test CPU", "float16")
    assert other["source"] == "measured" and other["value"] == 700e12


def test_a_provisional_peak_says_so_in_the_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    monkeypatch.setattr(roofline, "load_probe", lambda: RecordedProbe(SUITE_RUNNING))
    monkeypatch.setattr(roofline, "matmul_rate", lambda dtype: 58.7e9)
    peak = roofline.mfu_peak("Test CPU", "bfloat16")
    assert peak["source"] == "provisional"
    note = roofline.peak_note(0.78, peak)
    assert note is not None and "provisional" in note and "62% of the CPU time" in note
