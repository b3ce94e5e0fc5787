"""The fleet verdict fails closed: what a host lacks is a named `fail` in every report.

Five faulty hosts among healthy siblings of the same GPU model: one with 7 of its 8 GPUs,
one with 17 of 18 NVLinks up on GPU 3, one with no all-reduce rows, one with no bfloat16
rows, one whose record holds nothing. Each must be `fail` with its reason in fleet.json,
fleet.md and fleet.html, and no healthy host may be dragged along.
"""

from __future__ import annotations

import json
import math
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.records import finding, record, write
from workloads.cli import main
from workloads.fleet.command import render_fleet
from workloads.fleet.load import host_from_record
from workloads.fleet.verdict import judge

HEALTHY = [f"ok{i}" for i in range(5)]


def _healthy(host: str, **kwargs: Any) -> dict[str, Any]:
    return record(host, float32=True, links=kwargs.pop("links", 18), link_verdict="info",
                  **kwargs)


def _faulty() -> dict[str, tuple[dict[str, Any], str]]:
    """Each faulty host's record and the reason it must be named with."""
    no_allreduce = _healthy("no-allreduce")
    no_allreduce["findings"] = [f for f in no_allreduce["findings"] if f["check"] != "allreduce"]
    no_bfloat16 = _healthy("no-bfloat16")
    no_bfloat16["findings"] = [f for f in no_bfloat16["findings"] if f["item"] != "bfloat16"]
    empty = _healthy("empty")
    empty["findings"] = []
    return {"seven-gpus": (_healthy("seven-gpus", gpus=7), "fail: 7 GPUs where its group has 8"),
            "link-down": (_healthy("link-down", links={3: 17}),
                          "fail: NVLink: 17 of 18 links up on GPU 3"),
            "no-allreduce": (no_allreduce, "fail: no all-reduce figure"),
            "no-bfloat16": (no_bfloat16, "fail: no matmul bfloat16 figure"),
            "empty": (empty, "fail: the record holds no findings")}


class _Rows(HTMLParser):
    """The summary table's rows: data-host, data-verdict and the text of each reason."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, tuple[str, list[str]]] = {}
        self._host: str | None = None
        self._depth = 0  # inside a reason's <li> (the cause) or its evidence (nested <li>)
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "tr" and found.get("data-host"):
            self._host = str(found["data-host"])
            self.rows[self._host] = (str(found["data-verdict"]), [])
        elif tag == "li" and self._host:
            self._depth += 1
            if self._depth == 1:
                self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "li" and self._host:
            if self._depth == 1:
                self.rows[self._host][1].append("".join(self._text).strip())
            self._depth -= 1
        elif tag == "summary" and self._host and self._depth == 1:
            self._depth = 99  # the evidence list of this reason follows: not the cause
        elif tag == "details" and self._depth == 99:
            self._depth = 1
        elif tag == "tr":
            self._host = None

    def handle_data(self, data: str) -> None:
        if self._depth == 1:
            self._text.append(data)


def test_five_faulty_hosts_each_fail_with_their_reason_in_json_markdown_and_html(
        tmp_path: Path) -> None:
    faulty = _faulty()
    run = write(tmp_path / "run", [_healthy(h) for h in HEALTHY]
                + [rec for rec, _ in faulty.values()])
    render_fleet(run, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "fleet.json").read_text())
    verdicts = {h["host"]: h for h in report["hosts"]}
    markdown = (tmp_path / "out" / "fleet.md").read_text()
    parser = _Rows()
    parser.feed((tmp_path / "out" / "fleet.html").read_text())
    for host, (_, reason) in faulty.items():
        assert verdicts[host]["verdict"] == "fail", verdicts[host]
        assert any(r.startswith(reason) for r in verdicts[host]["reasons"]), verdicts[host]
        [line] = [line for line in markdown.splitlines() if line.startswith(f"| {host} |")]
        assert "| **fail** |" in line and reason in line, line
        shown_verdict, shown_reasons = parser.rows[host]
        assert shown_verdict == "fail"
        assert any(r.startswith(reason) for r in shown_reasons), shown_reasons
    for host in HEALTHY:
        assert verdicts[host]["verdict"] == "pass", verdicts[host]
        assert parser.rows[host][0] == "pass"
    assert report["counts"] == {"pass": 5, "warn": 0, "fail": 5}


def test_each_fault_is_one_line() -> None:
    """A fault is said once: the missing GPU not also as missing rows, the short links not
    also as the battery's own NVLink row, the empty record not also as every check missing."""
    faulty = _faulty()
    fleet = judge([host_from_record(h, _healthy(h)) for h in HEALTHY]
                  + [host_from_record(h, rec) for h, (rec, _) in faulty.items()])
    for verdict in fleet.verdicts:
        if verdict.host in faulty:
            assert len(verdict.reasons) == 1, verdict.reasons


def test_links_the_battery_judged_are_named_once_against_the_board() -> None:
    records = [record(f"h{i}", links={3: 17} if i == 0 else 18, link_verdict="pass")
               for i in range(2)]
    verdict = judge([host_from_record(r["env"]["host"], r) for r in records]).verdicts[0]
    assert verdict.reasons == ["fail: NVLink: 17 of 18 links up on GPU 3"]


def test_links_short_on_several_gpus_are_one_line() -> None:
    records = [record(f"h{i}", links=0 if i == 0 else 18, link_verdict="pass") for i in range(3)]
    verdict = judge([host_from_record(r["env"]["host"], r) for r in records]).verdicts[0]
    assert verdict.reasons == ["fail: NVLink: 0 of 18 links up on GPUs 0–7"]


def test_a_host_alone_in_its_group_still_fails_for_links_below_its_board() -> None:
    verdict = judge([host_from_record("h0", record("h0", links={5: 16}))]).verdicts[0]
    assert verdict.reasons == ["fail: NVLink: 16 of 18 links up on GPU 5"]


def test_the_inventory_count_is_checked_even_for_a_host_alone() -> None:
    rec = record("h0", gpus=7)
    rec["inventory"] = {"expected_gpus": 8}
    verdict = judge([host_from_record("h0", rec)]).verdicts[0]
    assert verdict.reasons == ["fail: 7 GPUs where the inventory declares 8"]


def test_a_gpu_host_that_sees_no_gpu_fails() -> None:
    """All GPUs gone: the record looks like a CPU host's, in a run of GPU hosts."""
    blind = record("h9", gpus=0)
    blind["findings"].append(finding("matmul", "CPU", "float32", 1.5, unit="TFLOP/s"))
    verdict = judge([host_from_record(f"h{i}", record(f"h{i}")) for i in range(3)]
                    + [host_from_record("h9", blind)]).verdicts[-1]
    assert verdict.verdict == "fail"
    assert verdict.reasons[0].startswith("fail: no GPU visible, where 3 other hosts of this run "
                                         "have GPUs")


def test_a_gpu_without_rows_its_other_gpus_have_fails() -> None:
    records = [record(f"h{i}") for i in range(3)]
    records[0]["findings"] = [f for f in records[0]["findings"]
                              if not (f["device"] == "GPU 6" and f["check"] == "membw")]
    verdict = judge([host_from_record(r["env"]["host"], r) for r in records]).verdicts[0]
    assert verdict.reasons == ["fail: GPU 6: no membw copy row where the host's other GPUs "
                               "have one"]


def test_a_partial_record_fails_with_what_it_lacks_behind_one_line() -> None:
    records = [record(f"h{i}") for i in range(3)]
    records[0]["status"] = "running"
    records[0]["findings"] = [f for f in records[0]["findings"] if f["check"] == "matmul"]
    verdict = judge([host_from_record(r["env"]["host"], r) for r in records]).verdicts[0]
    assert verdict.reasons == ["fail: the record is partial: status 'running', not 'done' (the "
                               "battery did not finish)"]
    assert any("no all-reduce figure" in line for line in verdict.evidence[0])


def test_a_figure_that_is_not_a_number_is_the_hosts_failure_named(tmp_path: Path) -> None:
    records = [record(f"h{i}") for i in range(4)]
    records[1]["findings"][0]["value"] = math.nan
    records[2]["findings"][1]["value"] = math.inf
    records[3]["findings"][2]["value"] = -1.0
    run = write(tmp_path / "run", records)
    fleet, _ = render_fleet(run, tmp_path / "out")
    reasons = {v.host: v.reasons for v in fleet.verdicts}
    assert reasons["h1"] == ["fail: GPU 0 matmul bfloat16: the figure is not a number: the "
                             "measurement failed"]
    assert reasons["h2"] == ["fail: GPU 0 membw copy: the figure is infinite: the measurement "
                             "failed"]
    assert reasons["h3"] == ["fail: GPU 0 transfer host to device: the figure is negative: the "
                             "measurement failed"]
    assert reasons["h0"] == []
    for name in ("fleet.json", "fleet.md", "fleet.html", "fleet.csv"):
        text = (tmp_path / "out" / name).read_text()
        assert "nan" not in text.lower() and "inf%" not in text.lower(), name
    json.loads((tmp_path / "out" / "fleet.json").read_text(),
               parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


def test_a_slow_gpu_is_one_line_with_its_rows_a_click_away(tmp_path: Path) -> None:
    run = write(tmp_path / "run", [record(f"h{i}", float32=True,
                                          gpu_scale={3: 0.69} if i == 0 else None)
                                   for i in range(4)])
    fleet, _ = render_fleet(run, tmp_path / "out")
    verdict = fleet.verdicts[0]
    assert verdict.reasons == ["fail: GPU 3: 31 % below its group on all 4 checks"]
    assert len(verdict.evidence[0]) == 4
    page = (tmp_path / "out" / "fleet.html").read_text()
    assert '<details class="evidence"><summary>fail: GPU 3: 31 % below its group on all 4 ' \
           "checks</summary><ul><li>GPU 3 matmul bfloat16 " in page


def test_a_fleet_where_every_host_stands_alone_says_so_first(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = write(tmp_path / "run", [record("h0", model="NVIDIA H100 80GB HBM3"),
                                   record("h1", model="NVIDIA A100-SXM4-80GB"),
                                   record("h2", model="NVIDIA H200")])
    assert main(["report", "--fleet", str(run), "--output", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "fleet: 3 pass, 0 warn, 0 fail"
    assert lines[1].startswith("Every host stands alone: 3 host(s)")
    markdown = (tmp_path / "out" / "fleet.md").read_text().splitlines()
    assert markdown[2].startswith("> **Every host stands alone")
    page = (tmp_path / "out" / "fleet.html").read_text()
    assert page.index('id="alone"') < page.index('class="counts"')
    assert json.loads((tmp_path / "out" / "fleet.json").read_text())["note"].startswith(
        "Every host stands alone")


def test_a_fleet_with_siblings_has_no_such_note(tmp_path: Path) -> None:
    fleet = judge([host_from_record(f"h{i}", record(f"h{i}")) for i in range(3)])
    assert fleet.note is None


def test_rows_that_only_report_a_problem_are_nobody_elses_due() -> None:
    """The battery writes an XID row, or a slow GPU pair's row, only where it happened: a
    sibling without one lacks nothing, nor do a host's other GPUs (the row shapes of
    workloads/accept/errors.py and p2p.py)."""
    records = [record(f"h{i}", gpus=4) for i in range(2)]
    for rec in records:
        rec["findings"].append(finding("errors", "host", "kernel log", None, verdict="pass",
                                       reason="journal: no XID or SXid since boot"))
    records[0]["findings"] += [
        finding("errors", f"GPU {g}", "XID 79", None, verdict="fail",
                reason="GPU has fallen off the bus: reset the GPU, then drain and RMA")
        for g in (1, 2)]
    records[0]["findings"].append(finding("p2p", "GPU 0 → GPU 3", "copy 256 MiB", 12.0,
                                          unit="GB/s", limit=300.0, verdict="warn",
                                          reason="4% of 300 GB/s"))
    fleet = judge([host_from_record(r["env"]["host"], r) for r in records])
    verdicts = {v.host: v for v in fleet.verdicts}
    assert (verdicts["h1"].verdict, verdicts["h1"].reasons) == ("pass", [])
    assert all("no " not in reason for reason in verdicts["h0"].reasons), verdicts["h0"].reasons
    assert verdicts["h0"].verdict == "fail"  # the XID itself, the battery's own verdict
