"""FLOPs counted from the model match a hand count; the peak is measured once and cached."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from workloads import roofline


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
