"""Print records as a results table: what a user reads at the end of a run."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS: list[tuple[str, str]] = [
    ("model", "model"),
    ("backend", "backend"),
    ("data", "data"),
    ("replicas", "replicas"),
    ("global_batch_size", "global batch"),
    ("precision", "precision"),
    ("xla", "XLA"),
    ("examples_per_sec", "examples/s"),
    ("mfu", "MFU"),
    ("step_time_s", "s/step"),
    ("epoch_times_s", "epoch times (s)"),
    ("accuracy", "test acc."),
]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if value < 1 else f"{value:,.1f}"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    return str(value)


def _format(key: str, value: Any) -> str:
    """MFU as a percentage of the measured peak; everything else by :func:`_cell`."""
    if key == "mfu" and isinstance(value, float):
        return f"{value:.0%}"
    return _cell(value)


def print_records(records: Iterable[dict[str, Any]], title: str = "Results") -> None:
    table = Table(title=title)
    for _, header in COLUMNS:
        table.add_column(header, justify="right" if header != "model" else "left")
    for record in records:
        table.add_row(*(_format(key, record.get(key)) for key, _ in COLUMNS))
    console = Console()
    if not console.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        console = Console(width=160)
    console.print(table)
