"""The fleet verdict over generated fleets: one planted fault is never `pass`, noise never fails.

Fleets of battery-shaped records (`workloads.fleet.synthetic`: the rows, items and devices a
real GPU battery writes) with 3-8 hosts of 1, 2, 4 or 8 GPUs, every figure within ±3 % of
its healthy value: drawn uniformly, or at the two extremes only (the worst case for the
noise floor: half the hosts 3 % fast, half 3 % slow). One host gets one defect of the kinds
the fleet step exists to catch. `workloads bench fleet --rates N` measures the same over a
fixed number of fleets and prints the rates (docs/benchmarks.md).
"""

from __future__ import annotations

import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.fleet.load import host_from_record
from workloads.fleet.model import FleetVerdict
from workloads.fleet.synthetic import CHECKS, MATMUL, Defect, synthetic_record
from workloads.fleet.verdict import judge


class Extremes(random.Random):
    """Noise at its bounds only: every `uniform(a, b)` is a or b."""

    def uniform(self, a: float, b: float) -> float:
        return a if self.random() < 0.5 else b


@st.composite
def fleet_shape(draw: st.DrawFn) -> tuple[int, int, random.Random]:
    hosts = draw(st.integers(min_value=3, max_value=8))
    gpus = draw(st.sampled_from([1, 2, 4, 8]))
    seed = draw(st.integers(min_value=0, max_value=2**32 - 1))
    rng = Extremes(seed) if draw(st.booleans()) else random.Random(seed)
    return hosts, gpus, rng


@st.composite
def defects(draw: st.DrawFn, gpus: int) -> Defect:
    kinds = ["missing GPU", "slow GPU", "missing check", "missing dtype", "empty record",
             "partial record"] + (["NVLink down"] if gpus > 1 else [])
    return Defect(kind=draw(st.sampled_from(kinds)),
                  gpu=draw(st.integers(min_value=0, max_value=gpus - 1)),
                  factor=draw(st.floats(min_value=0.3, max_value=0.8)),
                  links_down=draw(st.integers(min_value=1, max_value=18)),
                  check=draw(st.sampled_from(CHECKS)),
                  dtype=draw(st.sampled_from([dtype for dtype, _, _ in MATMUL])))


def _judge(records: list[dict[str, Any]]) -> FleetVerdict:
    return judge([host_from_record(r["env"]["host"], r) for r in records])


def _explain(fleet: FleetVerdict) -> str:
    return "\n".join(f"{v.host} {v.verdict}: {v.reasons}" for v in fleet.verdicts)


@given(shape=fleet_shape())
def test_family_healthy_fleets_within_3_percent_all_pass(
        shape: tuple[int, int, random.Random]) -> None:
    hosts, gpus, rng = shape
    fleet = _judge([synthetic_record(f"h{i}", gpus, rng) for i in range(hosts)])
    assert {v.verdict for v in fleet.verdicts} == {"pass"}, _explain(fleet)


@given(shape=fleet_shape(), data=st.data())
def test_family_a_host_with_one_planted_defect_is_never_pass(
        shape: tuple[int, int, random.Random], data: st.DataObject) -> None:
    """...and its healthy siblings still pass: the defect is named on the host that has it."""
    hosts, gpus, rng = shape
    defect = data.draw(defects(gpus))
    bad = data.draw(st.integers(min_value=0, max_value=hosts - 1))
    records = [synthetic_record(f"h{i}", gpus, rng, defect=defect if i == bad else None)
               for i in range(hosts)]
    fleet = _judge(records)
    verdicts = {v.host: v.verdict for v in fleet.verdicts}
    assert verdicts.pop(f"h{bad}") != "pass", f"{defect.describe()}\n{_explain(fleet)}"
    assert set(verdicts.values()) == {"pass"}, f"{defect.describe()}\n{_explain(fleet)}"
    if defect.kind != "slow GPU" or defect.factor <= 0.65:  # 0.65 × 1.03 < 0.7 × 0.97
        assert fleet.counts()["fail"] == 1, f"{defect.describe()}\n{_explain(fleet)}"


@settings(max_examples=50)  # one rule, one host: fewer examples cover it
@given(shape=fleet_shape(), declared=st.integers(min_value=1, max_value=8))
def test_family_the_inventory_count_decides_where_it_is_declared(
        shape: tuple[int, int, random.Random], declared: int) -> None:
    """A host declared with more GPUs than it shows fails even when all its group agree."""
    hosts, gpus, rng = shape
    records = [synthetic_record(f"h{i}", gpus, rng) for i in range(hosts)]
    records[0]["inventory"] = {"expected_gpus": declared}
    verdict = _judge(records).verdicts[0]
    if declared > gpus:
        assert verdict.verdict == "fail"
        assert f"{gpus} GPU{'s' if gpus > 1 else ''} where the inventory declares {declared}" \
            in verdict.reasons[0]
    else:
        assert verdict.verdict == ("warn" if declared < gpus else "pass"), verdict.reasons
