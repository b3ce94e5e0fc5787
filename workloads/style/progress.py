"""What the optimisation loop tells the user: nothing (benchmarks, tests) or a progress bar.

The loop calls a reporter only when the losses have reached the host anyway
(every ``--print-every`` iterations), so reporting never adds a device sync.
Output goes to stderr; stdout keeps the one-line summary that scripts read.
"""

from __future__ import annotations

from typing import Any


class Reporter:
    """The silent reporter; subclasses override what they show."""

    def start(self, iterations: int) -> None:
        """The loop is about to run up to ``iterations`` steps."""

    def progress(self, done: int, rows: list[list[float]]) -> None:
        """``done`` steps finished; ``rows`` is the loss history so far (total first)."""

    def finish(self) -> None:
        """The loop has ended (converged, finished, or failed)."""


class RichReporter(Reporter):
    """A rich progress bar with a line of loss terms every time the losses arrive.

    The line for row ``i`` is the loss of the image after ``i`` updates: each step
    returns the loss of the image it starts from, so after 10 steps the newest loss
    known is iteration 9's (the last image's loss is in the summary and record).
    """

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.bar: Any = None
        self.task: Any = None

    def start(self, iterations: int) -> None:
        if not self.console.is_terminal:  # logs and pipes get the loss lines only
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("style"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("style", total=iterations)

    def progress(self, done: int, rows: list[list[float]]) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=done)
        total, content, style, tv = rows[-1]
        self.console.print(
            f"iteration {len(rows) - 1:>5}  total {total:.4g}  content {content:.4g}  "
            f"style {style:.4g}  tv {tv:.4g}",
            highlight=False,
        )

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.stop()
