"""`workloads report --history DIR` as a text table per host, and as one HTML page."""

from __future__ import annotations

import html

from workloads import printable
from workloads.fleet.baselines import DRIFT_WARN
from workloads.fleet.history import HostHistory, Run

MARKS = {"warn": "← 5 % or more below its baseline", "fail": "← 30 % or more below its baseline"}


def _figure(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"


def _change(history: HostHistory, name: str) -> str:
    change = history.change(name)
    return "-" if change is None else f"{change:+.1%}".replace("%", " %")


def render_text(runs: list[Run], histories: list[HostHistory]) -> str:
    """One block per host: a row per figure, a column per run, the baseline and the change."""
    names = [printable.line(run.name, 40) for run in runs]
    width = max([10, *(len(name) for name in names)])
    lines = [f"{len(runs)} run(s), oldest first: {', '.join(names)}; "
             f"per-GPU figures are the host's worst GPU; a figure {DRIFT_WARN:.0%} or more "
             "below its baseline is marked"]
    for history in histories:
        since = (f"baseline {history.baseline_started}" if history.baseline_started
                 else "no baseline yet")
        lines += ["", f"{printable.line(history.host)} ({printable.line(history.group)}), "
                  f"{printable.line(since)}"]
        series = {printable.line(name): name for name in history.series}
        label = max([6, *(len(name) for name in series)])
        header = f"  {'figure':<{label}}  {'baseline':>{width}}" + "".join(
            f"  {name:>{width}}" for name in names) + "  last vs baseline"
        lines.append(header)
        lines.append(f"  {'verdict':<{label}}  {'':>{width}}" + "".join(
            f"  {printable.line(verdict or '-', 20):>{width}}" for verdict in history.verdicts))
        for shown, name in series.items():
            values = history.series[name]
            level = history.level(name)
            lines.append(f"  {shown:<{label}}  {_figure(history.baseline[name]):>{width}}"
                         + "".join(f"  {_figure(v):>{width}}" for v in values)
                         + f"  {_change(history, name):>16}"
                         + (f"  {MARKS[level]}" if level else ""))
    return "\n".join(lines) + "\n"


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: .5em 0 1.5em; }
td, th { padding: .2em .6em; border-bottom: 1px solid #ddd; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.warn { background: #fff3e0; color: #e65100; } .fail { background: #fdecea; color: #b71c1c; }
.note { color: #555; }
"""


def _e(text: object) -> str:
    """Record text for HTML: controls and bidi shown (:mod:`workloads.printable`), then escaped."""
    return html.escape(printable.line(text, 2000), quote=True)


def render_html(runs: list[Run], histories: list[HostHistory], title: str) -> str:
    """The same tables as one self-contained page (no script, nothing fetched)."""
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
           f"<h1>{_e(title)}</h1>",
           f'<p class="note">{len(runs)} run(s), oldest first. Per-GPU figures are the host\'s '
           f"worst GPU. A change of {DRIFT_WARN:.0%} or more below the host's own baseline (its "
           "first accepted record) warns; 30 % or more fails.</p>"]
    for history in histories:
        since = (f"baseline {history.baseline_started}" if history.baseline_started
                 else "no baseline yet")
        out.append(f'<h2 data-host="{_e(history.host)}">{_e(history.host)}</h2>'
                   f'<p class="note">{_e(history.group)}, {_e(since)}</p>')
        out.append("<table><tr><th>figure</th><th>baseline</th>"
                   + "".join(f"<th>{_e(run.name)}</th>" for run in runs)
                   + "<th>last vs baseline</th></tr>")
        out.append("<tr><td>verdict</td><td></td>" + "".join(
            f'<td class="{_e(v) if v in ("warn", "fail") else ""}">{_e(v or "-")}</td>'
            for v in history.verdicts) + "<td></td></tr>")
        for name, values in history.series.items():
            level = history.level(name)
            out.append(f'<tr data-series="{_e(name)}" data-level="{_e(level)}"><td>{_e(name)}</td>'
                       f"<td>{_e(_figure(history.baseline[name]))}</td>"
                       + "".join(f"<td>{_e(_figure(v))}</td>" for v in values)
                       + f'<td class="{_e(level)}">{_e(_change(history, name))}</td></tr>')
        out.append("</table>")
    out.append("</body></html>")
    return "\n".join(out)
