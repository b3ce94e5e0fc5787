"""What the user sees while a sweep runs and when it ends.

A rich progress bar (runs done / failed / left, elapsed, ETA) plus one log line
per ended run, so a log file or CI output, where no bar is drawn, still tells
the story. The ETA is runs left divided by this sweep's measured throughput:
rich's own estimate averages over 30 s, shorter than one run of a real study.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from workloads.sweep.expand import Pset, format_value
from workloads.sweep.runner import Running


def console(stderr: bool = True) -> Console:
    """Progress and logs go to stderr, tables to stdout; lines never wrap (grep finds them)."""
    out = Console(stderr=stderr, log_path=False, soft_wrap=True)
    if out.is_terminal:
        return out
    return Console(stderr=stderr, log_path=False, soft_wrap=True, width=160)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class SweepProgress:
    """Progress bar and per-run lines for one sweep invocation (an ``Observer``)."""

    def __init__(self, todo: Sequence[Pset], varied: list[str], out: Console | None = None) -> None:
        self.console = out or console()
        self.varied = varied
        self.total = len(todo)
        self.done = 0
        self.failed = 0
        self.started_at = time.time()
        self._progress = Progress(
            TextColumn("sweep"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[counts]}"),
            TimeElapsedColumn(),
            TextColumn("ETA {task.fields[eta]}"),
            console=self.console,
            auto_refresh=False,  # refreshed from the sweep loop: no extra thread
        )
        self._task = self._progress.add_task("sweep", total=self.total, counts="", eta="?")
        self._update()

    def __enter__(self) -> SweepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._update()
        self._progress.stop()

    @property
    def left(self) -> int:
        return self.total - self.done - self.failed

    def eta_seconds(self) -> float | None:
        ended = self.done + self.failed
        if not ended:
            return None
        rate = ended / (time.time() - self.started_at)
        return self.left / rate

    def run_started(self, running: Running) -> None:
        pset = running.pset
        self._progress.console.log(
            f"start [{pset.index}] {pset.label(self.varied)} on {running.slot.label}", style="dim"
        )

    def run_ended(self, row: dict[str, Any]) -> None:
        name = " ".join(f"{k}={format_value(row.get(k))}" for k in self.varied)
        took = format_duration(row["_pset_runtime"])
        if row["_failed"]:
            self.failed += 1
            self._progress.console.log(
                f"[red]failed[/red] {name} after {took} ({row['_failure']}): {row['_exc_txt']}"
            )
        else:
            self.done += 1
            self._progress.console.log(f"[green]ok[/green] {name} in {took} on {row['_device']}")
        self._update()

    def tick(self) -> None:
        self._update()

    def note(self, text: str) -> None:
        """A line about the sweep itself (a failed database write), not about one run."""
        self._progress.console.log(text, style="yellow", markup=False)

    def _update(self) -> None:
        counts = f"done {self.done}  failed {self.failed}  left {self.left}"
        self._progress.update(
            self._task,
            completed=self.done + self.failed,
            counts=counts,
            eta=format_duration(self.eta_seconds()) if self.left else "0:00",
        )
        self._progress.refresh()


def summary_table(rows: list[dict[str, Any]], varied: list[str], metrics: list[str]) -> Table:
    """One line per run of the sweep: varied values, outcome, runtime, key results."""
    table = Table(title="Sweep results", show_lines=False)
    for name in varied:
        table.add_column(name, justify="right")
    table.add_column("status")
    table.add_column("runtime", justify="right")
    for name in metrics:
        table.add_column(name.rstrip("_").replace("_", " "), justify="right")
    for row in rows:
        status = f"[red]{row['_failure']}[/red]" if row["_failed"] else "[green]ok[/green]"
        cells = [format_value(row.get(name)) for name in varied]
        cells += [status, format_duration(row.get("_pset_runtime"))]
        cells += [_metric(row.get(name)) for name in metrics]
        table.add_row(*cells)
    return table


def _metric(value: Any) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
