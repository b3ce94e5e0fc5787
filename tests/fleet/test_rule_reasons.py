"""tests/fleet/rule_reasons.py against the lines the fleet report itself writes.

The reasons come from `render_fleet` over records in `workloads accept`'s shape, so a change
of wording in workloads/fleet breaks this test, not a flaky fleet run. The single-figure
baseline line ("..., 45% below 55.16 of its baseline of ...") was missing from the fleet
test's pattern: a healthy host measured again and failed by its baseline for one noisy
figure was taken for a defect.
"""

from __future__ import annotations

from pathlib import Path

from tests.fleet.records import record, write
from tests.fleet.rule_reasons import fails_by_the_rules
from workloads.fleet.command import render_fleet

FIRST, SECOND = "20261125T000000Z", "20261202T000000Z"


def _fail_lines(root: Path, second: list[dict[str, object]]) -> dict[str, list[str]]:
    first = [record(f"h{i}", gpus=2) for i in range(4)]
    for rec in first:
        rec["started_at"] = "2026-11-25T00:00:00Z"
    render_fleet(write(root / FIRST, first), None, root / "baselines")
    fleet, _ = render_fleet(write(root / SECOND, second), None, root / "baselines")
    return {v.host: [r for r in v.reasons if r.startswith("fail")] for v in fleet.verdicts}


def test_every_wording_of_the_two_rules_is_recognised(tmp_path: Path) -> None:
    lines = _fail_lines(tmp_path, [
        record("h0", gpus=2, allreduce=370.0 * 0.5),       # one figure below its baseline
        record("h1", gpus=2, scale=0.6),                   # every figure: folded, both rules
        record("h2", gpus=2, gpu_scale={1: 0.5}),          # one GPU below its group
        record("h3", gpus=2),
    ])
    single_baseline = [line for line in lines["h0"] if "of its baseline" in line]
    assert single_baseline and "% below 370 of its baseline of" in single_baseline[0], lines
    assert lines["h1"] and lines["h2"], lines
    for host in ("h0", "h1", "h2"):
        assert all(fails_by_the_rules(line) for line in lines[host]), lines[host]
    assert lines["h3"] == []


def test_a_failed_check_or_an_incomplete_record_is_not_the_rules() -> None:
    for line in ("fail: matmul bfloat16: the check failed (CUDA error)",
                 "fail: the record is incomplete: no training figure",
                 "fail: 7 of 8 GPUs (the inventory declares 8)"):
        assert not fails_by_the_rules(line)
