"""`workloads report --fleet DIR`: read a run's records, judge the fleet, write the four outputs."""

from __future__ import annotations

from pathlib import Path

from workloads import printable
from workloads.fleet.baselines import load_baselines, write_baselines
from workloads.fleet.history import host_histories, load_runs
from workloads.fleet.inventory import run_inventory
from workloads.fleet.load import load_fleet
from workloads.fleet.model import FleetVerdict
from workloads.fleet.render_history import render_html as history_html
from workloads.fleet.render_history import render_text as history_text
from workloads.fleet.render_html import render_html
from workloads.fleet.render_text import render_csv, render_json, render_markdown
from workloads.fleet.verdict import judge
from workloads.records import atomic_write_bytes


def render_fleet(directory: Path, output: Path | None, baselines: Path | None = None,
                 *, renew: bool = False, inventory: Path | None = None
                 ) -> tuple[FleetVerdict, list[Path]]:
    """Judge the records in `directory` and write fleet.{html,md,csv,json} into `output`.

    Every host `inventory` lists (by default the run's own inventory.txt, where accept.yml
    wrote one) that has no record fails.

    With `baselines`, each host is also compared with its accepted record there, and the
    records of the hosts that pass become the baselines of those without one (all of them,
    with `renew`); the baselines written are listed after the four outputs.
    """
    expected = run_inventory(directory, inventory) if directory.is_dir() else []
    fleet = judge(load_fleet(directory, expected), load_baselines(baselines))
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
    if baselines is not None:
        written += write_baselines(fleet, directory, baselines, renew)
    return fleet, written


def render_history(directory: Path, output: Path | None) -> tuple[str, Path]:
    """Each host's figures over the runs in `directory`: the text, and history.html's path."""
    runs, baselines = load_runs(directory)
    histories = host_histories(runs, baselines)
    path = (output or directory) / "history.html"
    title = f"Acceptance history: {directory.resolve().name}"
    atomic_write_bytes(path, history_html(runs, histories, title).encode())
    return history_text(runs, histories), path


def summary_line(fleet: FleetVerdict) -> str:
    counts = fleet.counts()
    failing = [printable.line(v.host) for v in fleet.verdicts if v.verdict == "fail"]
    warning = [printable.line(v.host) for v in fleet.verdicts if v.verdict == "warn"]
    line = f"fleet: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail"
    if failing:
        line += f"; fail: {', '.join(failing[:10])}{' ...' if len(failing) > 10 else ''}"
    if warning:
        line += f"; warn: {', '.join(warning[:10])}{' ...' if len(warning) > 10 else ''}"
    return line + (f"\n{printable.line(fleet.note, 400)}" if fleet.note else "")
