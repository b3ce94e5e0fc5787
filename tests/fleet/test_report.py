"""The fleet report's outputs and its command line, including hostile host names."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fleet.records import error_stub, finding, record, write
from workloads import printable
from workloads.cli import main
from workloads.fleet.command import render_fleet
from workloads.fleet.load import host_from_record
from workloads.fleet.render_html import HTML_FIELD_MAX, render_html
from workloads.fleet.verdict import judge


class _Elements(HTMLParser):
    """Every element's tag and attributes, and the text outside tags."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))


def _elements(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(page)
    return parser.elements


def test_the_four_outputs_name_the_slow_and_the_broken_host(tmp_path: Path) -> None:
    run = write(tmp_path / "run", [record(f"h{i}", scale=0.55 if i == 1 else 1.0) for i in range(5)]
                + [error_stub("h9", "unreachable: ssh timed out")])
    _, written = render_fleet(run, tmp_path / "out")
    assert [p.name for p in written] == ["fleet.html", "fleet.md", "fleet.csv", "fleet.json"]
    summary = json.loads((tmp_path / "out" / "fleet.json").read_text())
    assert summary["counts"] == {"pass": 4, "warn": 0, "fail": 2}  # h1: 45 % below its group
    page = (tmp_path / "out" / "fleet.html").read_text()
    rows = {a["data-host"]: a["data-verdict"] for tag, a in _elements(page)
            if tag == "tr" and "data-host" in a}
    assert rows["h1"] == "fail" and rows["h9"] == "fail" and rows["h0"] == "pass"
    outlying = {a["data-host"] for tag, a in _elements(page)
                if tag == "circle" and a.get("data-outlier") == "true"}
    assert outlying == {"h1"}
    assert "http://" not in page and "https://" not in page and "<script" not in page
    table = list(csv.DictReader(io.StringIO((tmp_path / "out" / "fleet.csv").read_text())))
    assert {r["host"] for r in table if r["outlier"] == "True"} == {"h1"}
    assert "| h9 |" in (tmp_path / "out" / "fleet.md").read_text()


def test_a_host_is_marked_only_in_the_charts_where_it_stands_out(tmp_path: Path) -> None:
    """CPU hosts: every figure is the host's (no GPU index), as in a CPU battery."""
    records: dict[str, dict[str, Any]] = {
        f"h{i}": {"env": {"host": f"h{i}", "cpu": "EPYC", "cpu_count": 2}, "status": "done",
                  "findings": [finding("matmul", "CPU", "float32", 150.0, unit="GFLOP/s"),
                               finding("allreduce", "2 logical CPU devices", "4 MiB",
                                       0.5 if i == 2 else 1.5, unit="GB/s")]}
        for i in range(4)}
    fleet = judge([host_from_record(name, r) for name, r in records.items()])
    page = render_html(fleet, "fleet")
    marked: dict[str, set[str]] = {}
    series = ""
    for tag, attrs in _elements(page):
        if tag == "svg":
            series = str(attrs["data-series"])
        elif tag == "circle" and attrs.get("data-outlier") == "true":
            marked.setdefault(series, set()).add(str(attrs["data-host"]))
    assert marked == {"allreduce 4 MiB": {"h2"}}


@given(name=st.text(min_size=1, max_size=40), reason=st.text(max_size=80))
def test_family_no_host_name_or_reason_can_add_markup(name: str, reason: str) -> None:
    """Host names and reasons come from the hosts: whatever they hold stays text."""
    records = [record("h0", gpus=1), record("h1", gpus=1), record("h2", gpus=1)]
    records[0]["findings"][0]["verdict"] = "fail"
    records[0]["findings"][0]["reason"] = reason
    fleet = judge([host_from_record(name, records[0])]
                  + [host_from_record(r["env"]["host"], r) for r in records[1:]] +
                  [host_from_record(name + "x", error_stub(name + "x", reason))])
    page = render_html(fleet, "fleet")
    tags = {tag for tag, _ in _elements(page)}
    assert tags <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4",
                    "section", "p", "span", "table", "tr", "th", "td", "ul", "li", "details",
                    "summary", "svg", "line", "text", "circle"}
    hosts = {a.get("data-host") for tag, a in _elements(page) if tag == "tr"}
    assert printable.line(name, HTML_FIELD_MAX) in hosts  # controls shown as their escapes


def _workloads(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workloads", "report", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_bad_fleet_directories_get_one_line_each(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for args, words in ((["--fleet", str(tmp_path / "nope")], "is not a directory"),
                        (["--fleet", str(tmp_path / "empty")], "holds no <host>.json records"),
                        (["--fleet", str(tmp_path / "empty"), "x"], "takes one run directory")):
        result = _workloads(*args)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and len(lines[0]) < 200, result.stderr


def test_the_command_prints_the_summary_first(tmp_path: Path) -> None:
    run = write(tmp_path / "run", [record(f"h{i}", gpus=1) for i in range(3)]
                + [error_stub("h9", "crashed")])
    result = _workloads("--fleet", str(run))
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first == "fleet: 3 pass, 0 warn, 1 fail; fail: h9"
    assert (run / "report" / "fleet.html").is_file()


def test_the_scale_bench_prints_and_records_its_figures(tmp_path: Path) -> None:
    """`workloads bench fleet` (the 1,000-host sizing) end to end on a small fleet."""
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, "-m", "workloads", "bench", "fleet", "--hosts", "60",
                             "--gpus", "2", "--output", str(out)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "fleet of 60 hosts × 2 GPUs" in result.stdout
    figures = json.loads(out.read_text())
    assert figures["hosts"] == 60 and figures["record_bytes"] > 0
    assert figures["verdicts"]["fail"] == 2  # hosts 7 and 57: one of every 50 has a GPU at 60 %
    bad = subprocess.run([sys.executable, "-m", "workloads", "bench", "fleet", "--hosts", "0"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_the_rates_bench_prints_and_records_false_positives_and_misses(tmp_path: Path) -> None:
    """`workloads bench fleet --rates N` end to end on a few fleets of two-GPU hosts."""
    out = tmp_path / "rates.json"
    result = subprocess.run([sys.executable, "-m", "workloads", "bench", "fleet", "--rates", "2",
                             "--gpus", "2", "--output", str(out)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "healthy hosts not pass" in result.stdout
    scenarios = {s["scenario"]: s for s in json.loads(out.read_text())["scenarios"]}
    assert scenarios["healthy"]["false_positive_rate"] == 0.0
    assert scenarios["healthy"]["miss_rate"] is None
    for name in ("a GPU missing", "1 NVLink down", "a GPU 20 % slow", "a check missing",
                 "an empty record"):
        assert scenarios[name]["miss_rate"] == 0.0, scenarios[name]
        assert scenarios[name]["fleets"] == 2
    bad = subprocess.run([sys.executable, "-m", "workloads", "bench", "fleet", "--rates", "0"],
                         capture_output=True, text=True, timeout=120, check=False)
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 1 and "--rates: must be > 0" in lines[0], \
        bad.stderr


def test_a_noise_outside_0_to_50_percent_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "fleet", "--rates", "2", "--noise", "50"])
    lines = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(lines) == 1, lines
    assert "--noise: must be at least 0 and below 50, got 50" in lines[0]
