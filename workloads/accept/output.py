"""What ``workloads accept`` shows and keeps: the verdict table and the JSON record."""

from __future__ import annotations

from typing import Any

from workloads import printable
from workloads.accept.battery import Outcome
from workloads.accept.verdicts import FAIL, PASS, SEVERITY, WARN, Finding, worst

# A reason is a sentence or two (a check's figure, its limit and what to do); a kernel log
# line quoted in one (an XID's process name) is the host's users' text.
REASON_MAX = 400


def _cell(text: object, limit: int = printable.FIELD_MAX) -> Any:
    """A table cell that shows ``text`` as it is: control characters escaped, no markup."""
    from rich.text import Text

    return Text(printable.line(text, limit))

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "info": "cyan", "skip": "dim"}


def overall(findings: list[Finding]) -> str:
    """``fail`` if any check fails, else ``warn`` if any warns, else ``pass``."""
    return worst(f.verdict for f in findings)


def exit_code(findings: list[Finding]) -> int:
    """0 when nothing fails, 1 when a check fails."""
    return 1 if any(f.verdict == FAIL for f in findings) else 0


def record_fields(outcome: Outcome, quick: bool, only: list[str], level: int) -> dict[str, Any]:
    """The ``accept`` record's own fields (the caller adds the envelope and ``env``)."""
    counts = {v: sum(1 for f in outcome.findings if f.verdict == v) for v in SEVERITY}
    return {
        "mode": "quick" if quick else "full",
        "checks_selected": only,
        "dcgm_level": level,
        "backend": outcome.backend,
        "devices": outcome.devices,
        "unknown_gpus": outcome.unknown_gpus,
        "sizes": outcome.sizes.__dict__,
        "durations_s": outcome.durations_s,
        "others_cpu_share": outcome.others_cpu_share,
        "findings": [f.as_dict() for f in outcome.findings],
        "counts": counts,
        "verdict": overall(outcome.findings),
        "exit_code": exit_code(outcome.findings),
    }


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"


WIDE = 150  # below this many columns the rows are printed as two lines each


def print_table(outcome: Outcome, title: str) -> None:
    """The verdict table; on a narrow terminal, one finding per two lines instead."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # logs and CI: do not squeeze the reasons into 80 columns
        console = Console(width=200)
    for line in outcome.unknown_gpus:
        console.print(f"{line} is not in the reference table: figures, no datasheet verdict")
    if console.width >= WIDE:
        console.print(_table(outcome, title))
    else:
        _lines(console, outcome, title)
    for finding in outcome.findings:
        if finding.check == "p2p" and finding.details.get("gbps"):
            console.print(p2p_matrix(finding))
    verdict = overall(outcome.findings)
    failed = sum(1 for f in outcome.findings if f.verdict == FAIL)
    warned = sum(1 for f in outcome.findings if f.verdict == WARN)
    summary = {
        PASS: "every check passed",
        WARN: f"{warned} warning(s), nothing failed",
        FAIL: f"{failed} check(s) failed, {warned} warning(s)",
    }.get(verdict, verdict)
    console.print(f"[{STYLE[verdict]}]{verdict.upper()}[/]: {summary}")


def _figure_text(f: Finding) -> str:
    unit = f" {f.unit}" if f.unit and f.value is not None else ""
    return f"{_number(f.value)}{unit}" if f.value is not None else "-"


def _table(outcome: Outcome, title: str) -> Any:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for column, justify in (
        ("check", "left"),
        ("device", "left"),
        ("item", "left"),
        ("figure", "right"),
        ("limit", "right"),
        ("fraction", "right"),
        ("verdict", "left"),
        ("reason", "left"),
    ):
        table.add_column(column, justify=justify, overflow="fold")  # type: ignore[arg-type]
    for f in outcome.findings:
        table.add_row(
            _cell(f.check),
            _cell(f.device),
            _cell(f.item),
            _figure_text(f),
            _number(f.limit),
            f"{f.fraction:.0%}" if f.fraction is not None else "-",
            f"[{STYLE[f.verdict]}]{f.verdict}[/]",
            _cell(f.reason, REASON_MAX),
        )
    return table


def _lines(console: Any, outcome: Outcome, title: str) -> None:
    from rich.markup import escape
    from rich.padding import Padding
    from rich.text import Text

    console.print(f"[bold]{escape(title)}[/]")
    for f in outcome.findings:
        limit = f" of {_number(f.limit)}" if f.limit else ""
        share = f" ({f.fraction:.0%})" if f.fraction is not None else ""
        figure = f"  {_figure_text(f)}{limit}{share}" if f.value is not None else ""
        console.print(
            f"[{STYLE[f.verdict]}]{f.verdict:<5}[/] {escape(printable.line(f.check))}  "
            f"{escape(printable.line(f.device))}  {escape(printable.line(f.item))}{escape(figure)}"
        )
        reason = Text(printable.line(f.reason, REASON_MAX), style="dim")
        console.print(Padding(reason, (0, 0, 0, 6)))


def p2p_matrix(summary: Finding) -> Any:
    """The GPU-pair matrix as a table: GB/s from each row's GPU to each column's.

    A pair below its warn line is coloured as its verdict; ``*`` marks a pair the driver
    copied through host memory (no direct peer access). The caption counts the ordered pairs
    of each path NVML named ("2 × NVLink 2.0: 8 pairs").
    """
    from collections import Counter

    from rich.table import Table

    details = summary.details
    labels: list[str] = details["labels"]
    paths = Counter(
        str(path).split(" [")[0].split(", the slower")[0]
        for row in details.get("path") or [] for path in row if path
    )
    caption = "; ".join(f"{path}: {count} pairs" for path, count in sorted(paths.items()))
    table = Table(title=f"p2p: GB/s, from row to column ({details.get('method', '')})",
                  caption=caption or None)
    table.add_column("from \\ to")
    for label in labels:
        table.add_column(_cell(label), justify="right")
    for i, source in enumerate(labels):
        cells = []
        for j, _ in enumerate(labels):
            value = details["gbps"][i][j]
            if value is None:
                cells.append("-")
                continue
            style = STYLE.get(details["verdict"][i][j] or "info", "")
            mark = "*" if details["direct"][i][j] is False else ""
            cells.append(f"[{style}]{value:,.0f}{mark}[/]")
        table.add_row(_cell(source), *cells)
    return table
