"""A group of three where two hosts are slow: both fail, as the slower of a pair does.

The median of the two other hosts is their mean, which a second slow host drags halfway
down: [100, 60, 60] read by the statistics alone passes both 60s, where the pair [100, 60]
fails its 60 (adding a faulty host must not hide both). The family: one or two of three
hosts slow by each factor from 0.5 to 0.69 of healthy (30 % or more below the healthy
one), in fleet.json, .md and .html, and healthy trios of several seeds that all pass.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.fleet.test_shapes import _assert_everywhere, _record, _write
from workloads.fleet.command import render_fleet
from workloads.fleet.synthetic import Defect


@pytest.mark.parametrize("factor", [0.5, 0.6, 0.65, 0.69])
@pytest.mark.parametrize("slow", [("b",), ("b", "c")])
def test_each_slow_host_of_three_fails(tmp_path: Path, factor: float,
                                       slow: tuple[str, ...]) -> None:
    records = {name: _record(name, seed, defect=Defect("slow host", factor=factor)
                             if name in slow else None)
               for seed, name in enumerate("abc")}
    render_fleet(_write(tmp_path / "run", dict(records)), tmp_path / "out")
    expected: dict[str, tuple[str, str | None]] = {
        name: ("fail", "below") if name in slow else ("pass", None) for name in "abc"}
    _assert_everywhere(tmp_path / "out", expected)


@pytest.mark.parametrize("seed", range(0, 40, 7))
def test_a_healthy_trio_passes(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    records = {name: _record(name, rng.randrange(1 << 30)) for name in "abc"}
    render_fleet(_write(tmp_path / "run", dict(records)), tmp_path / "out")
    _assert_everywhere(tmp_path / "out", dict.fromkeys("abc", ("pass", None)))
