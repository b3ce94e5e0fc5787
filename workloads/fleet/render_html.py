"""The fleet report as one HTML file: summary first, then a chart per check, no network needed.

Why SVG written here rather than matplotlib: each point carries its host, device and verdict
as attributes and a tooltip, so a person hovering a red dot reads the host's name, and a
test (or a script) reads the page's verdicts from the DOM. Everything is inline (no script,
font or style sheet fetched), so the page works from `file://` on an air-gapped controller.
Every string from a record is escaped: host names and reasons come from the hosts.
"""

from __future__ import annotations

import html
from collections import defaultdict

from workloads import printable
from workloads.fleet.model import Figure, FleetVerdict, SeriesStats
from workloads.fleet.outliers import MIN_GROUP
from workloads.fleet.verdict import small_group_note

WIDTH, HEIGHT, PAD_LEFT, PAD_RIGHT, PAD_TOP, PAD_BOTTOM = 760, 220, 70, 150, 16, 28
COLOURS = {"pass": "#2e7d32", "warn": "#ef6c00", "fail": "#c62828", "skip": "#757575"}

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 980px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; } h3 { font-size: 1em; }
table { border-collapse: collapse; margin: .5em 0; }
td, th { padding: .25em .6em; border-bottom: 1px solid #ddd; text-align: left; }
.badge { display: inline-block; padding: 0 .5em; border-radius: 3px; color: #fff; }
.verdict-pass { background: #2e7d32; } .verdict-warn { background: #ef6c00; }
.verdict-fail { background: #c62828; }
.counts span { margin-right: 1.5em; font-size: 1.2em; }
ul.reasons { margin: 0; padding-left: 1.2em; }
svg text { font: 11px system-ui, sans-serif; } .note { color: #555; }
.alone { border-left: 4px solid #c62828; padding: .4em .8em; background: #fdecea; }
details.evidence summary { cursor: pointer; } details.evidence ul { color: #555; }
table.pairs td { text-align: right; font-variant-numeric: tabular-nums; }
table.pairs td.warn { background: #ffe0b2; } table.pairs td.fail { background: #ffcdd2; }
"""
HTML_FIELD_MAX = 2000  # a reason with its rows; a host name is far shorter
MAX_PAIR_DEVICES = 72  # an NVL72 domain; a record claiming more is not drawn


def _e(text: object) -> str:
    """Record text for HTML: controls and bidi shown (:mod:`workloads.printable`), then escaped."""
    return html.escape(printable.line(text, HTML_FIELD_MAX), quote=True)


def _badge(verdict: str) -> str:
    return f'<span class="badge verdict-{_e(verdict)}">{_e(verdict)}</span>'


def _reason(text: str, evidence: list[str]) -> str:
    """One cause as a list item; the rows behind it a click away."""
    if not evidence:
        return f"<li>{_e(text)}</li>"
    rows = "".join(f"<li>{_e(row)}</li>" for row in evidence)
    return (f'<li><details class="evidence"><summary>{_e(text)}</summary>'
            f"<ul>{rows}</ul></details></li>")


def _summary(fleet: FleetVerdict) -> list[str]:
    counts = fleet.counts()
    out = ['<section id="summary"><h2>Summary</h2>']
    if fleet.note:
        out.append(f'<p class="alone" id="alone">{_e(fleet.note)}</p>')
    out += ['<p class="counts">',
           *(f'<span data-count="{v}">{_badge(v)} {counts.get(v, 0)}</span>'
             for v in ("pass", "warn", "fail")),
           "</p>"]
    bad = sorted((v for v in fleet.verdicts if v.verdict != "pass"),
                 key=lambda v: (v.verdict != "fail", v.host))
    if bad:
        out.append("<table><tr><th>host</th><th>hardware</th><th>verdict</th><th>why</th></tr>")
        for verdict in bad:
            reasons = "".join(_reason(r, e) for r, e in
                              zip(verdict.reasons, verdict.evidence or [[]] * len(verdict.reasons),
                                  strict=True))
            out.append(f'<tr class="host" data-host="{_e(verdict.host)}" '
                       f'data-verdict="{_e(verdict.verdict)}"><td>{_e(verdict.host)}</td>'
                       f"<td>{_e(verdict.group)}</td><td>{_badge(verdict.verdict)}</td>"
                       f'<td><ul class="reasons">{reasons}</ul></td></tr>')
        out.append("</table>")
    else:
        out.append("<p>Every host passes.</p>")
    good = [v for v in fleet.verdicts if v.verdict == "pass"]
    if good:
        out.append(f"<details><summary>{len(good)} host(s) pass</summary><table>")
        out.extend(f'<tr class="host" data-host="{_e(v.host)}" data-verdict="pass">'
                   f"<td>{_e(v.host)}</td><td>{_e(v.group)}</td></tr>" for v in good)
        out.append("</table></details>")
    sizes: dict[str, int] = defaultdict(int)
    for host in fleet.hosts:
        if host.ran:
            sizes[host.group] += 1
    out.extend(f'<p class="note">{_e(small_group_note(g, sizes[g]))}</p>'
               for g in fleet.small_groups)
    out.append("</section>")
    return out


def _chart(stats: SeriesStats, figures: list[Figure],
           outlying: set[tuple[str, str, str | None]]) -> str:
    """A dot per host (and device), the group median, the outlier bound and the datasheet lines."""
    figures = sorted(figures, key=lambda f: (f.host, f.device or ""))
    lines: list[tuple[str, float, str]] = []
    if stats.median is not None:
        lines.append(("median", stats.median, "#1565c0"))
        if stats.low_bound is not None:
            lines.append(("outlier bound", stats.low_bound, "#ef6c00"))
        if stats.fail_bound is not None:
            lines.append(("fail bound", stats.fail_bound, "#c62828"))
    limits = {(f.warn_at, f.fail_at, f.limit) for f in figures}
    if len(limits) == 1:
        warn_at, fail_at, limit = next(iter(limits))
        for name, value, colour in (("datasheet", limit, "#555"), ("warn", warn_at, "#ef6c00"),
                                    ("fail", fail_at, "#c62828")):
            if value is not None:
                lines.append((name, value, colour))
    values = [f.value for f in figures] + [v for _, v, _ in lines]
    top, bottom = max(values), min(0.0, min(values))
    span = (top - bottom) or 1.0
    plot_w = WIDTH - PAD_LEFT - PAD_RIGHT
    plot_h = HEIGHT - PAD_TOP - PAD_BOTTOM

    def y(value: float) -> float:
        return PAD_TOP + plot_h * (1 - (value - bottom) / span)

    parts = [f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" role="img" '
             f'data-series="{_e(stats.series)}" data-group="{_e(stats.group)}">',
             f'<line x1="{PAD_LEFT}" y1="{PAD_TOP}" x2="{PAD_LEFT}" '
             f'y2="{HEIGHT - PAD_BOTTOM}" stroke="#999"/>',
             f'<text x="{PAD_LEFT - 6}" y="{y(top) + 4:.1f}" text-anchor="end">{top:.4g}</text>',
             f'<text x="{PAD_LEFT - 6}" y="{y(bottom) + 4:.1f}" '
             f'text-anchor="end">{bottom:.4g}</text>']
    for name, value, colour in lines:
        dash = "" if name == "median" else ' stroke-dasharray="5,4"'
        parts.append(f'<line class="ref" data-ref="{_e(name)}" x1="{PAD_LEFT}" y1="{y(value):.1f}" '
                     f'x2="{WIDTH - PAD_RIGHT}" y2="{y(value):.1f}" stroke="{colour}"{dash}/>'
                     f'<text x="{WIDTH - PAD_RIGHT + 4}" y="{y(value) + 4:.1f}" fill="{colour}">'
                     f"{_e(name)} {value:.4g}</text>")
    step = plot_w / max(len(figures), 1)
    for index, figure in enumerate(figures):
        is_out = (figure.host, figure.check, figure.device) in outlying
        colour = COLOURS["warn"] if is_out else COLOURS.get(figure.verdict, COLOURS["pass"])
        cx, cy = PAD_LEFT + step * (index + 0.5), y(figure.value)
        label = f"{figure.host}{' ' + figure.device if figure.device else ''}"
        radius = 5 if is_out or figure.verdict != "pass" else 3
        parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{radius}" fill="{colour}" '
                     f'data-host="{_e(figure.host)}" data-device="{_e(figure.device or "")}" '
                     f'data-value="{figure.value:.6g}" data-verdict="{_e(figure.verdict)}" '
                     f'data-outlier="{"true" if is_out else "false"}">'
                     f"<title>{_e(label)}: {figure.value:.4g} {_e(figure.unit)}</title></circle>")
        if is_out or figure.verdict == "fail":
            parts.append(f'<text x="{cx + 7:.1f}" y="{cy + 4:.1f}" '
                         f'fill="{colour}">{_e(label)}</text>')
    unit = figures[0].unit if figures else ""
    parts.append(f'<text x="{PAD_LEFT}" y="{HEIGHT - 8}">{len(figures)} figures, {_e(unit)}; '
                 "hosts in name order</text></svg>")
    return "".join(parts)


def _pairs(fleet: FleetVerdict) -> list[str]:
    """Each host's GPU-pair matrix whose battery found a pair below its line, then the rest.

    GB/s from the row's GPU to the column's; a pair below its warn or fail line is coloured,
    and ``*`` marks one the driver copied through host memory. Everything comes from the
    host's record: numbers are checked to be numbers, and a matrix of more devices than an
    NVLink domain holds is not drawn.
    """
    hosts = [h for h in fleet.hosts if h.p2p]
    if not hosts:
        return []
    hosts.sort(key=lambda h: ((h.p2p or {}).get("row_verdict") not in ("fail", "warn"), h.name))
    out = ['<section id="pairs"><h2>GPU pairs</h2><p class="note">GB/s of a copy from the '
           "row's device to the column's (the copy engines, as nvbandwidth); coloured: below "
           "the pair's warn or fail line; *: no direct peer access (through host memory).</p>"]
    for host in hosts:
        matrix = host.p2p or {}
        labels = [str(x) for x in matrix.get("labels", [])][:MAX_PAIR_DEVICES]
        rows = matrix.get("gbps") or []
        verdicts = matrix.get("verdict") if isinstance(matrix.get("verdict"), list) else None
        direct = matrix.get("direct") if isinstance(matrix.get("direct"), list) else None
        if not labels or len(rows) != len(labels):
            continue
        summary = str(matrix.get("row_verdict") or "")
        head = "".join(f"<th>{_e(label)}</th>" for label in labels)
        body = []
        for i, label in enumerate(labels):
            cells = []
            for j in range(len(labels)):
                value = _cell(rows, i, j)
                verdict = _cell(verdicts, i, j) if verdicts else None
                mark = "*" if direct and _cell(direct, i, j) is False else ""
                kind = verdict if verdict in ("warn", "fail") else ""
                text = "-" if not isinstance(value, int | float) else f"{value:,.0f}{mark}"
                cells.append(f'<td class="{kind}" data-from="{_e(label)}" '
                             f'data-to="{_e(labels[j])}">{_e(text)}</td>')
            body.append(f"<tr><th>{_e(label)}</th>{''.join(cells)}</tr>")
        is_open = " open" if summary in ("fail", "warn") else ""
        out.append(f'<details class="pairs" data-host="{_e(host.name)}"{is_open}><summary>'
                   f"{_e(host.name)} {_badge(summary) if summary else ''}</summary>"
                   f'<table class="pairs"><tr><th>from \\ to</th>{head}</tr>{"".join(body)}'
                   "</table></details>")
    out.append("</section>")
    return out


def _cell(matrix: object, i: int, j: int) -> object:
    try:
        return matrix[i][j]  # type: ignore[index]
    except (IndexError, KeyError, TypeError):
        return None


def render_html(fleet: FleetVerdict, title: str) -> str:
    """The whole page."""
    outlying = {(o.figure.host, o.figure.check, o.figure.device) for o in fleet.outliers}
    figures_by: dict[tuple[str, str], list[Figure]] = defaultdict(list)
    group_of = {h.name: h.group for h in fleet.hosts}
    for host in fleet.hosts:
        for figure in host.figures:
            figures_by[(group_of[figure.host], figure.series)].append(figure)
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>",
           f"<h1>{_e(title)}</h1>", *_summary(fleet), '<section id="checks"><h2>Checks</h2>',
           f'<p class="note">Each dot is a host (or one GPU of it). Blue: the group median; '
           "orange and red dashed next to it: the outlier and fail bounds (each host is judged "
           "against the median of the other hosts: a modified z-score beyond 3.5 with the MAD "
           "at least 2 % of the median, and 10 % below it, warns; 30 % below it fails; "
           f"series of {MIN_GROUP} hosts or more); grey, orange and red dashed: the datasheet "
           "limit and the battery's warn and fail thresholds.</p>"]
    current_group = None
    for stats in sorted(fleet.stats, key=lambda s: (s.group, s.series)):
        if stats.group != current_group:
            current_group = stats.group
            out.append(f"<h3>{_e(stats.group)}</h3>")
        figures = figures_by.get((stats.group, stats.series), [])
        if not figures:
            continue
        out.append(f"<h4>{_e(stats.series)}</h4>{_chart(stats, figures, outlying)}")
    out.append("</section>")
    out.extend(_pairs(fleet))
    out.append("</body></html>")
    return "\n".join(out)
