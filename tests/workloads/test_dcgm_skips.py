"""DCGM's verdicts in full: a test DCGM skipped is named, and the deep profile without DCGM
says it ran without it, never a quiet pass.

The documents have the shape of ``dcgmi diag -r LEVEL -j`` from DCGM 4 (test categories, a
``results`` list per test with ``entity_id`` and ``status``: Pass, Fail, Warn, Skip), as in
``tests/workloads/test_accept_verdicts.py``; a generated family of them (fixed seed) mixes
statuses across tests and GPUs.
"""

from __future__ import annotations

import random
from pathlib import Path
from types import SimpleNamespace

import pytest

from workloads.accept import dcgm
from workloads.accept.verdicts import FAIL, PASS, SKIP, WARN, worst

TESTS = ("software", "pcie", "memory", "targeted_stress", "targeted_power", "memory_bandwidth",
         "diagnostic")


def document(results: dict[str, list[tuple[int, str]]]) -> dict[str, object]:
    return {"DCGM Diagnostic": {"test_categories": [{"category": "all", "tests": [
        {"name": name, "results": [
            {"entity_id": gpu, "status": status,
             **({"info": [f"{name} skipped: not supported on this SKU"]} if status == "Skip"
                else {})}
            for gpu, status in rows]}
        for name, rows in results.items()]}]}}


def corpus(seed: int = 49, size: int = 60) -> list[dict[str, list[tuple[int, str]]]]:
    pick = random.Random(seed)
    out = []
    for _ in range(size):
        gpus = pick.randint(1, 8)
        out.append({name: [(gpu, pick.choice(["Pass", "Pass", "Pass", "Skip", "Warn", "Fail"]))
                           for gpu in range(gpus)] for name in pick.sample(TESTS, 4)})
    return out


@pytest.mark.parametrize("level", [1, 2, 3, 4])
@pytest.mark.parametrize("results", corpus())
def test_every_skipped_test_is_named_and_none_counts_as_passed(
    level: int, results: dict[str, list[tuple[int, str]]]
) -> None:
    findings = dcgm.judge(document(results), level)
    skipped = {(name, gpu) for name, rows in results.items() for gpu, s in rows if s == "Skip"}
    named = {(f.reason.split(":")[0], int(f.device.split()[1])) for f in findings
             if "skipped by DCGM" in f.reason}
    assert named == skipped
    for f in findings:
        if "skipped by DCGM" in f.reason:
            assert f.verdict == (WARN if level >= 3 else SKIP)
            assert f"at level {level}" in f.reason and "not run, so not passed" in f.reason
    statuses = {s for rows in results.values() for _, s in rows}
    if skipped and level >= 3:
        assert worst(f.verdict for f in findings) != PASS
    if statuses == {"Pass"}:
        assert [f.verdict for f in findings] == [PASS]


def test_a_level_3_run_whose_stress_tests_were_skipped_does_not_pass() -> None:
    results = {"software": [(0, "Pass")], "targeted_stress": [(0, "Skip")],
               "targeted_power": [(0, "Skip")]}
    findings = dcgm.judge(document(results), 3)
    assert worst(f.verdict for f in findings) == WARN
    assert [f.reason.split(":")[0] for f in findings if f.verdict == WARN] == [
        "targeted_stress", "targeted_power"]
    assert findings[-1].reason == "1 test results passed; 2 skipped (named above)"


@pytest.mark.parametrize(("level", "verdict"), [(1, SKIP), (2, SKIP), (3, WARN), (4, WARN)])
def test_without_dcgm_the_deep_levels_say_they_ran_without_it(
    level: int, verdict: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no dcgmi, in dcgm's own view only: a PATH set in os.environ would reach the children
    # that the suite's background jobs start meanwhile
    monkeypatch.setattr(dcgm, "shutil", SimpleNamespace(which=lambda *_a, **_k: None))
    [finding] = dcgm.run_diag(level)
    assert finding.verdict == verdict
    if verdict == WARN:
        assert finding.reason.startswith("ran without DCGM (no dcgmi on PATH)")
        assert "not a pass of DCGM" in finding.reason


def test_a_failure_beside_skips_still_fails() -> None:
    results = {"memory": [(0, "Fail"), (1, "Pass")], "targeted_stress": [(0, "Skip")]}
    assert worst(f.verdict for f in dcgm.judge(document(results), 3)) == FAIL
