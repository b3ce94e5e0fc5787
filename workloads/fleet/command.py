"""`workloads report --fleet DIR`: read a run's records, judge the fleet, write the four outputs."""

from __future__ import annotations

from pathlib import Path

from workloads.fleet.load import load_fleet
from workloads.fleet.model import FleetVerdict
from workloads.fleet.render_html import render_html
from workloads.fleet.render_text import render_csv, render_json, render_markdown
from workloads.fleet.verdict import judge
from workloads.records import atomic_write_bytes


def render_fleet(directory: Path, output: Path | None) -> tuple[FleetVerdict, list[Path]]:
    """Judge the records in `directory`; write fleet.{html,md,csv,json} into `output`."""
    fleet = judge(load_fleet(directory))
    out = output or directory / "report"
    title = f"Fleet acceptance: {directory.resolve().name}"
    written = []
    for name, text in (("fleet.html", render_html(fleet, title)),
                       ("fleet.md", render_markdown(fleet, title)),
                       ("fleet.csv", render_csv(fleet)),
                       ("fleet.json", render_json(fleet))):
        path = out / name
        atomic_write_bytes(path, text.encode())
        written.append(path)
    return fleet, written


def summary_line(fleet: FleetVerdict) -> str:
    counts = fleet.counts()
    failing = [v.host for v in fleet.verdicts if v.verdict == "fail"]
    warning = [v.host for v in fleet.verdicts if v.verdict == "warn"]
    line = f"fleet: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail"
    if failing:
        line += f"; fail: {', '.join(failing[:10])}{' ...' if len(failing) > 10 else ''}"
    if warning:
        line += f"; warn: {', '.join(warning[:10])}{' ...' if len(warning) > 10 else ''}"
    return line + (f"\n{fleet.note}" if fleet.note else "")
