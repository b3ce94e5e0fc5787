"""``workloads bench cifar10``: fair legs, each leg's settings printed, ratios and MFU recorded."""

from __future__ import annotations

import json
from pathlib import Path

from tests.workloads.conftest import run_cli
from workloads.cifar10.train import cpu_bf16_flags


def test_bench_compares_like_with_like_and_says_how(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    out = tmp_path / "bench.json"
    result = run_cli(
        ["bench", "cifar10", "--steps", "2", "--batch-size", "8", "--output", str(out)],
        isolated_env,
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    legs = record["legs"]
    assert list(legs) == [
        "plain_fit_numpy",
        "harness_synthetic",
        "harness_real_format",
        "harness_fast_cpu_synthetic",  # no GPU here: the fast CPU path is compared too
        "harness_fast_cpu_real_format",
    ]
    plain, harness = legs["plain_fit_numpy"]["settings"], legs["harness_synthetic"]["settings"]
    # Same precision and the same jit_compile for the baseline and the harness (Keras'
    # "auto" would give the baseline XLA on a GPU): only the data path differs.
    for key in ("dtype_policy", "xla_mode"):
        assert plain[key] == harness[key] == legs["harness_real_format"]["settings"][key]
    assert plain["data"] == "numpy float32 in memory"
    assert "ran out of data" not in result.stderr  # the plain leg ran all its steps
    fast = legs["harness_fast_cpu_synthetic"]["settings"]
    expected = "mixed_bfloat16" if cpu_bf16_flags() else "float32"
    assert fast["dtype_policy"] == record["fast_cpu"]["dtype_policy"] == expected
    for name, leg in legs.items():
        assert f"] {name}: data=" in result.stdout  # every leg's settings are printed
        assert leg["flops_per_example"] > 0 and leg["peak_flops"] > 0 and leg["mfu"] > 0
    ratios = record["ratios"]
    assert ratios["real_format_vs_synthetic"] == (
        legs["harness_real_format"]["examples_per_sec"]
        / legs["harness_synthetic"]["examples_per_sec"]
    )
    assert ratios["fast_cpu_vs_plain_fit"] > 0
    assert "fast_cpu_vs_plain_fit: " in result.stdout


def test_bf16_is_chosen_only_where_the_cpu_computes_it_natively(tmp_path: Path) -> None:
    from dataclasses import replace

    from workloads.cifar10 import train

    epyc = tmp_path / "epyc"
    epyc.write_text("processor\t: 0\nflags\t\t: fpu avx512f avx512_bf16 sse\n\nprocessor\t: 1\n")
    older = tmp_path / "older"
    older.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f\n")
    assert train.cpu_bf16_flags(epyc) == ["avx512_bf16"]
    assert train.cpu_bf16_flags(older) == []
    assert train.cpu_bf16_flags(tmp_path / "missing") == []
    config = replace(train.TrainConfig(), xla=True, precision="fp32")
    chosen, facts = train.fast_cpu_config(config)
    assert chosen.xla is False  # XLA's CPU convolutions measured 5x slower
    assert chosen.precision == ("mixed" if train.cpu_bf16_flags() else "fp32")
    assert facts["reason"].startswith(
        "bfloat16: the CPU has" if train.cpu_bf16_flags() else "float32"
    )
