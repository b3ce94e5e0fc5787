"""Fleets of the shapes operators really run, each judged right in fleet.json, .md and .html.

The shapes (issue 47): a host the inventory lists that left no record; a record cut short
(the rest of the fleet is still judged, no exit 2); a host with one GPU of another model
(named, and the host stays in its group); the same GPU UUID in two records and twice in one;
a group of two hosts where one is 40 % slow (the slower fails, the other passes); a GPU
about 30 % slow whose checks straddle the fail line (one line, not a fail and a warn). The
records are the battery's shape (`workloads.fleet.synthetic`, with NVML-form UUIDs); the
families draw generated fleets of every new shape from `workloads.fleet.rates`, the
generator `workloads bench fleet --rates` prints its table from.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fleet.test_fail_closed import _Rows
from workloads.fleet.command import render_fleet
from workloads.fleet.load import host_from_record
from workloads.fleet.rates import SCENARIOS, fleet_hosts
from workloads.fleet.synthetic import OTHER_GPU_NAME, Defect, synthetic_record
from workloads.fleet.verdict import judge

HEALTHY = [f"ok{i}" for i in range(4)]


def _record(host: str, seed: int, **kwargs: Any) -> dict[str, Any]:
    return synthetic_record(host, 8, random.Random(seed), **{"noise": 0.01, **kwargs})


def _write(run: Path, records: dict[str, dict[str, Any] | bytes]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    for name, rec in records.items():
        data = rec if isinstance(rec, bytes) else json.dumps(rec).encode()
        (run / f"{name}.json").write_bytes(data)
    return run


def _outputs(out: Path) -> tuple[dict[str, Any], str, _Rows]:
    report = json.loads((out / "fleet.json").read_text())
    parser = _Rows()
    parser.feed((out / "fleet.html").read_text())
    return {h["host"]: h for h in report["hosts"]}, (out / "fleet.md").read_text(), parser


def _assert_everywhere(out: Path, expected: dict[str, tuple[str, str | None]]) -> None:
    """Each host's verdict, and the one reason that says why, in JSON, Markdown and HTML."""
    verdicts, markdown, html = _outputs(out)
    for host, (verdict, words) in expected.items():
        assert verdicts[host]["verdict"] == verdict, verdicts[host]
        assert html.rows[host][0] == verdict, html.rows[host]
        rows = [line for line in markdown.splitlines() if line.startswith(f"| {host} |")]
        if verdict == "pass":
            assert verdicts[host]["reasons"] == [] and rows == []
            continue
        assert words is not None
        assert len(verdicts[host]["reasons"]) == 1, verdicts[host]  # one cause, one line
        assert words in verdicts[host]["reasons"][0], verdicts[host]
        assert len(html.rows[host][1]) == 1 and words in html.rows[host][1][0], html.rows[host]
        [line] = rows
        assert f"| **{verdict}** |" in line and words in line, line


def test_every_shape_gets_its_verdict_in_json_markdown_and_html(tmp_path: Path) -> None:
    records: dict[str, dict[str, Any] | bytes] = {
        h: _record(h, i) for i, h in enumerate(HEALTHY)}
    records["mixed"] = _record("mixed", 10, defect=Defect("other-model GPU", gpu=5))
    records["twin-a"] = _record("twin-a", 11)
    records["twin-b"] = _record("twin-a", 12)  # twin-a's machine (its UUIDs), measured again
    records["twice"] = _record("twice", 13, defect=Defect("duplicate UUID", gpu=2))
    records["slow"] = _record("slow", 14, slow_gpu=3, slow_factor=0.70)
    records["cut"] = json.dumps(_record("cut", 15)).encode()[:5000]
    run = _write(tmp_path / "run", records)
    (run / "inventory.txt").write_text("# accept.yml's hosts\n" + "\n".join(
        [*records, "absent"]) + "\n")
    fleet, _ = render_fleet(run, tmp_path / "out")
    _assert_everywhere(tmp_path / "out", {
        **{h: ("pass", None) for h in HEALTHY},
        "mixed": ("fail", f"GPU 5 is {OTHER_GPU_NAME.removeprefix('NVIDIA ')} where this "
                          "host's other GPUs are H100 80GB HBM3"),
        "twin-a": ("fail", "GPUs 0–7 share their UUIDs with twin-b"),
        "twin-b": ("fail", "GPUs 0–7 share their UUIDs with twin-a"),
        "twice": ("fail", "GPUs 2–3 share their UUIDs with another GPU of this host"),
        "slow": ("fail", "GPU 3: "),
        "cut": ("fail", "its record cut.json cannot be read: it is not valid JSON"),
        "absent": ("fail", "no record: the inventory lists it and run/ has no absent.json"),
    })
    mixed = next(v for v in fleet.verdicts if v.host == "mixed")
    assert mixed.group == "NVIDIA H100 80GB HBM3"  # with its siblings, not a group of one


def test_a_pair_fails_the_slower_host_and_passes_the_other(tmp_path: Path) -> None:
    run = _write(tmp_path / "pair", {"a": _record("a", 1),
                                     "b": _record("b", 2, defect=Defect("slow host", factor=0.6))})
    render_fleet(run, tmp_path / "out")
    _assert_everywhere(tmp_path / "out", {
        "a": ("pass", None), "b": ("fail", "below the other host on all")})
    assert "a figure 30 % or more worse than the other host's fails" in \
        (tmp_path / "out" / "fleet.md").read_text()


def test_one_slow_gpu_straddling_the_fail_line_is_one_line() -> None:
    """Figures 27-33 % below (noise around 30 %): one fail line naming the GPU and the range."""
    hosts = [_record(h, i, noise=0.0) for i, h in enumerate(HEALTHY)]
    slow = synthetic_record("slow", 8, random.Random(7), noise=0.03, slow_gpu=6,
                            slow_factor=0.70)
    fleet = judge([host_from_record(r["env"]["host"], r) for r in [*hosts, slow]])
    verdict = next(v for v in fleet.verdicts if v.host == "slow")
    levels = {o.level for o in fleet.outliers if o.figure.host == "slow"}
    assert levels == {"fail", "warn"}, "the seed must straddle the line for this test to mean it"
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith("fail: GPU 6: "), \
        verdict.reasons


NEW_SHAPES = [s for s in SCENARIOS if s.name in {
    "healthy, 2 hosts", "healthy, 2 GPU models", "no record (inventory)", "a record cut short",
    "a GPU of another model", "a UUID twice in a host", "a record under 2 names",
    "2 hosts, one 40 % slow", "3 hosts, two 40 % slow", "a host split 4+4 models"}]


def test_the_generated_shapes_are_all_there() -> None:
    assert len(NEW_SHAPES) == 10


@settings(max_examples=60, deadline=None)
@given(index=st.integers(min_value=0, max_value=len(NEW_SHAPES) - 1),
       gpus=st.sampled_from([2, 4, 8]), seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_family_each_new_shape_fails_its_planted_hosts_and_passes_the_rest(
        index: int, gpus: int, seed: int) -> None:
    scenario = NEW_SHAPES[index]
    hosts, planted = fleet_hosts(scenario, random.Random(seed), gpus, 0.03)
    fleet = judge(hosts)
    explained = "\n".join(f"{v.host} {v.verdict}: {v.reasons}" for v in fleet.verdicts)
    for verdict in fleet.verdicts:
        expected = "fail" if verdict.host in planted else "pass"
        assert verdict.verdict == expected, f"{scenario.name}\n{explained}"
        if verdict.host in planted:
            assert len(verdict.reasons) == 1, f"{scenario.name}\n{explained}"


def _report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workloads", "report", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_record_that_cannot_be_read_fails_its_host_and_the_rest_are_judged(
        tmp_path: Path) -> None:
    run = _write(tmp_path / "run", {"h0": _record("h0", 0), "h1": _record("h1", 1),
                                    "junk": b"{not json"})
    result = _report("--fleet", str(run))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "fleet: 2 pass, 0 warn, 1 fail; fail: junk"


def test_the_inventory_option_is_documented() -> None:
    result = _report("--help")
    assert result.returncode == 0
    assert "--inventory FILE" in result.stdout and "without a record" in result.stdout


@pytest.mark.parametrize(("content", "words"), [
    (None, "No such file"),
    ("dir", "is a directory"),
    (b"\xff\xfe\x00h", "not UTF-8 text"),
    ("gpu1\n| host | verdict |\n", "line 2: '| host | verdict |' is not a host name"),
    ("# nothing\n\n", "names no host"),
])
def test_a_bad_inventory_is_one_line_and_exit_2(tmp_path: Path, content: Any,
                                               words: str) -> None:
    run = _write(tmp_path / "run", {"h0": _record("h0", 0)})
    path = tmp_path / "hosts.txt"
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    result = _report("--fleet", str(run), "--inventory", str(path))
    assert result.returncode == 2, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "one a line" in lines[0], result.stderr
    assert not (run / "report").exists()  # nothing written on bad input


def test_the_inventory_goes_with_fleet_only(tmp_path: Path) -> None:
    result = _report("--inventory", str(tmp_path / "hosts.txt"))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        result.stderr.strip()] and "--inventory goes with --fleet" in result.stderr


def test_an_inventory_given_names_the_absent_host(tmp_path: Path) -> None:
    run = _write(tmp_path / "run", {f"h{i}": _record(f"h{i}", i) for i in range(3)})
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("h0\nh1\nh2\ngpu7  # racked last week\n")
    result = _report("--fleet", str(run), "--inventory", str(hosts))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "fleet: 3 pass, 0 warn, 1 fail; fail: gpu7"
