"""--precision: what auto picks, and when bench style lets bfloat16 replace float32."""

from __future__ import annotations

import pytest

from workloads.style.bench import compare_precisions
from workloads.style.config import resolve_precision


@pytest.mark.parametrize(
    ("requested", "device", "flags", "expected"),
    [
        ("auto", "CPU", ["avx512_bf16"], "bfloat16"),
        ("auto", "CPU", ["amx_bf16"], "bfloat16"),
        ("auto", "CPU", [], "float32"),  # emulated bfloat16 is slower than float32
        ("auto", "GPU:0 (NVIDIA H100 80GB HBM3)", ["avx512_bf16"], "float32"),  # not measured
        ("float32", "CPU", ["avx512_bf16"], "float32"),
        ("bfloat16", "CPU", [], "bfloat16"),  # asked for explicitly: honoured
    ],
)
def test_auto_is_bfloat16_only_where_it_was_measured_faster(
    requested: str, device: str, flags: list[str], expected: str
) -> None:
    assert resolve_precision(requested, device, flags) == expected


def _row(precision: str, rate: float, loss: float, width: int = 128) -> dict[str, object]:
    return {"width": width, "precision": precision, "iterations_per_sec": rate, "loss_last": loss}


def test_bfloat16_qualifies_when_faster_and_its_last_loss_within_two_percent() -> None:
    verdict = compare_precisions(
        [_row("float32", 8.0, 1000.0), _row("bfloat16", 12.0, 1015.0)], 128
    )
    assert verdict is not None
    assert verdict["speedup"] == pytest.approx(1.5)
    assert verdict["loss_difference"] == pytest.approx(0.015)
    assert verdict["verdict"] == "bfloat16 qualifies"


@pytest.mark.parametrize(("rate", "loss"), [(12.0, 1025.0), (12.0, 975.0), (7.0, 1000.0)])
def test_float32_is_kept_when_bfloat16_drifts_or_is_slower(rate: float, loss: float) -> None:
    verdict = compare_precisions([_row("float32", 8.0, 1000.0), _row("bfloat16", rate, loss)], 128)
    assert verdict is not None and verdict["verdict"] == "keep float32"


def test_no_verdict_until_both_precisions_ran_at_that_width() -> None:
    assert compare_precisions([_row("float32", 8.0, 1000.0)], 128) is None
    assert (
        compare_precisions([_row("float32", 8.0, 1.0), _row("bfloat16", 9.0, 1.0, 256)], 128)
        is None
    )
