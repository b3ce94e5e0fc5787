"""The fleet report as Markdown, CSV and JSON: the same verdicts, for people and for scripts."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from typing import Any

from workloads import printable
from workloads.fleet.model import FleetVerdict
from workloads.fleet.verdict import small_group_note


def render_markdown(fleet: FleetVerdict, title: str) -> str:
    counts = fleet.counts()
    lines = [f"# {_cell(title)}", ""]
    if fleet.note:
        lines += [f"> **{_cell(fleet.note)}**", ""]
    lines += [f"**{counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail** "
              f"({len(fleet.verdicts)} hosts)", ""]
    bad = sorted((v for v in fleet.verdicts if v.verdict != "pass"),
                 key=lambda v: (v.verdict != "fail", v.host))
    if bad:
        lines += ["| host | hardware | verdict | why |", "| --- | --- | --- | --- |"]
        lines += [f"| {_cell(v.host)} | {_cell(v.group)} | **{_cell(v.verdict)}** | "
                  f"{'<br>'.join(_cell(r) for r in v.reasons)} |" for v in bad]
        lines.append("")
    for group in fleet.small_groups:
        size = sum(1 for h in fleet.hosts if h.ran and h.group == group)
        lines.append(f"- {_cell(small_group_note(group, size))}")
    lines += ["", "## Group medians", "", "| hardware | check | hosts | median | outlier bound |",
              "| --- | --- | ---: | ---: | ---: |"]
    for s in sorted(fleet.stats, key=lambda s: (s.group, s.series)):
        median = f"{s.median:.4g}" if s.median is not None else "n/a"
        low = f"{s.low_bound:.4g}" if s.low_bound is not None else "n/a"
        lines.append(f"| {_cell(s.group)} | {_cell(s.series)} | {s.hosts} | {median} | {low} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Record text for Markdown: controls shown (:mod:`workloads.printable`), a `|` escaped.

    A line break or a `|` would end the cell early; an ESC would reach whoever runs
    ``cat fleet.md``.
    """
    return printable.line(text, MARKDOWN_FIELD_MAX).replace("|", "\\|")


MARKDOWN_FIELD_MAX = 2000  # a reason with its rows; a host name is far shorter


def figure_rows(fleet: FleetVerdict) -> list[dict[str, Any]]:
    outlying = {(o.figure.host, o.figure.check, o.figure.device) for o in fleet.outliers}
    group_of = {h.name: h.group for h in fleet.hosts}
    rows = []
    for host in sorted(fleet.hosts, key=lambda h: h.name):
        for f in host.figures:
            rows.append({"host": f.host, "group": group_of[f.host], "check": f.check,
                         "device": f.device or "", "value": f.value, "unit": f.unit,
                         "limit": f.limit, "verdict": f.verdict,
                         "outlier": (f.host, f.check, f.device) in outlying})
    return rows


def render_csv(fleet: FleetVerdict) -> str:
    buffer = io.StringIO()
    fields = ["host", "group", "check", "device", "value", "unit", "limit", "verdict", "outlier"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    writer.writerows({key: printable.line(value, MARKDOWN_FIELD_MAX) if isinstance(value, str)
                      else value for key, value in row.items()} for row in figure_rows(fleet))
    return buffer.getvalue()


def render_json(fleet: FleetVerdict) -> str:
    return json.dumps({
        "counts": fleet.counts(),
        "note": fleet.note,
        "hosts": [asdict(v) for v in fleet.verdicts],
        "small_groups": fleet.small_groups,
        "stats": [asdict(s) for s in fleet.stats],
        "figures": figure_rows(fleet),
    }, indent=1) + "\n"
