"""The sweep loop: hand free device slots to pending runs until none is left.

One thread, polling: runs are minutes long, so a quarter-second poll costs
nothing, and a single thread keeps ``preexec_fn`` safe and the database writes
in order. Slots form a FIFO queue; a slot returns to it the moment its run ends,
so long and short runs balance themselves (``multiprocessing.Pool.map``, which
psweep uses, deals out fixed chunks up front instead).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from workloads.sweep.database import SweepDatabase
from workloads.sweep.expand import Pset
from workloads.sweep.runner import RunContext, Running, finish, start, stop
from workloads.sweep.slots import Slot

POLL_SECONDS = 0.25


class Observer(Protocol):
    """Who is told about runs starting and ending (the progress display)."""

    def run_started(self, running: Running) -> None: ...

    def run_ended(self, row: dict[str, Any]) -> None: ...

    def tick(self) -> None: ...


def execute(
    ctx: RunContext,
    todo: Sequence[Pset],
    slots: Sequence[Slot],
    database: SweepDatabase,
    observer: Observer,
    run_timeout: float | None = None,
) -> list[dict[str, Any]]:
    """Run every pset of ``todo``; each row is in the database before the next run starts.

    On an interrupt (Ctrl-C, SIGTERM turned into KeyboardInterrupt) the runs in
    flight are stopped and not recorded, so the next sweep runs them again.
    """
    free = deque(slots)
    pending = deque(todo)
    running: list[Running] = []
    rows: list[dict[str, Any]] = []
    try:
        while pending or running:
            while pending and free:
                run = start(ctx, pending.popleft(), free.popleft(), run_timeout)
                running.append(run)
                observer.run_started(run)
            time.sleep(POLL_SECONDS)
            for run in list(running):
                if run.process.poll() is None:
                    if run.deadline is None or time.time() < run.deadline:
                        continue
                    run.timed_out = True
                    stop(run)
                running.remove(run)
                row = finish(ctx, run)
                database.add(row)
                rows.append(row)
                free.append(run.slot)
                observer.run_ended(row)
            observer.tick()
    finally:
        for run in running:
            stop(run, grace=5.0)
    return rows
