"""The sweep loop: hand free device slots to pending runs until none is left.

One thread, polling: runs are minutes long, so a quarter-second poll costs
nothing, and a single thread keeps ``preexec_fn`` safe and the database writes
in order. Slots form a FIFO queue; a slot returns to it the moment its run ends,
so long and short runs balance themselves (``multiprocessing.Pool.map``, which
psweep uses, deals out fixed chunks up front instead).

A database write that fails (a full disk, an I/O error) stops nothing that is
running: the row stays in memory and is written again at every poll; meanwhile
no new run starts (it would need the same disk). Once the runs in flight have
ended, the writes are tried for ``WORKLOADS_SWEEP_DB_RETRY_S`` more seconds (time
to free some space); if they still fail the sweep ends with one line and exit 2,
and the next sweep adopts the finished runs from their records.

A run that cannot start for the same reasons (its claim, directory or log
cannot be written) is treated alike: it is not started and stays first in line,
the runs in flight go on, and it is tried again at every poll; once nothing is
in flight, for the same ``WORKLOADS_SWEEP_DB_RETRY_S``, then one line and exit 2.
A run whose directory holds something planted (:class:`UnsafePath`) is left out
with one line, as one still live elsewhere (:class:`RunBusy`) is.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Protocol

from workloads.safefs import UnsafePath
from workloads.sweep.database import DatabaseWriteError, SweepDatabase
from workloads.sweep.expand import Pset
from workloads.sweep.lock import RunBusy
from workloads.sweep.runner import RunContext, Running, RunNotStarted, finish, start, stop
from workloads.sweep.slots import Slot

POLL_SECONDS = 0.25
DB_RETRY_SECONDS = 60.0  # after the last run ended: time to free space before giving up


class Observer(Protocol):
    """Who is told about runs starting and ending (the progress display)."""

    def run_started(self, running: Running) -> None: ...

    def run_ended(self, row: dict[str, Any]) -> None: ...

    def tick(self) -> None: ...

    def note(self, text: str) -> None: ...


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
    flight are stopped and not recorded, so the next sweep runs them again. Raises
    :class:`DatabaseWriteError` at the end when rows could not be written (above).
    """
    free = deque(slots)
    pending = deque(todo)
    running: list[Running] = []
    rows: list[dict[str, Any]] = []
    unsaved = _Unsaved(database, observer)
    blocked = _Unstartable(observer)
    try:
        while pending or running:
            if unsaved and not running:
                unsaved.finish()  # nothing in flight: wait for the disk, or give up
            while pending and free and not unsaved:
                pset = pending.popleft()
                try:
                    run = start(ctx, pset, free[0], run_timeout)
                except (RunBusy, UnsafePath) as exc:  # live elsewhere, or planted: leave it be
                    observer.note(f"{exc.one_line()}; not run by this sweep")
                    continue
                except RunNotStarted as exc:  # the disk: keep it first, try at the next poll
                    pending.appendleft(pset)
                    blocked.failed(exc, idle=not running)
                    break
                blocked.started()
                free.popleft()
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
                unsaved.add(row)
                rows.append(row)
                free.append(run.slot)
                observer.run_ended(row)
            unsaved.flush()
            observer.tick()
        unsaved.finish()
    finally:
        for run in running:
            stop(run, grace=5.0)
    return rows


class _Unsaved:
    """Rows whose database write failed, kept in order and written again on every flush."""

    def __init__(self, database: SweepDatabase, observer: Observer) -> None:
        self.database = database
        self.observer = observer
        self.rows: list[dict[str, Any]] = []
        self.error: DatabaseWriteError | None = None

    def __bool__(self) -> bool:
        return bool(self.rows)

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        self.flush()

    def flush(self) -> bool:
        """Write what is kept; True when nothing is left unsaved."""
        while self.rows:
            try:
                self.database.add(self.rows[0])
            except DatabaseWriteError as exc:
                if self.error is None or exc.reason != self.error.reason:
                    self.observer.note(
                        f"cannot write {self.database.path} ({exc.reason}): keeping "
                        f"{len(self.rows)} row(s) in memory and trying again; runs in flight "
                        "go on, no new run starts"
                    )
                self.error = exc
                return False
            self.rows.pop(0)
            if not self.rows and self.error is not None:
                self.observer.note(f"{self.database.path} written again: the sweep goes on")
                self.error = None
        return True

    def finish(self) -> None:
        """No run is left in flight: retry for a while, then give up with one line."""
        deadline = time.monotonic() + _retry_seconds()
        while not self.flush():
            if time.monotonic() >= deadline:
                assert self.error is not None
                raise self.error
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


class _Unstartable:
    """The state of runs that could not start (:class:`RunNotStarted`): one line per reason."""

    def __init__(self, observer: Observer) -> None:
        self.observer = observer
        self.error: RunNotStarted | None = None
        self.deadline: float | None = None

    def failed(self, exc: RunNotStarted, idle: bool) -> None:
        """Note a failed start; with nothing in flight, give up once the retry time is over."""
        if self.error is None or exc.reason != self.error.reason:
            self.observer.note(
                f"{exc.problem}: not started, runs in flight go on, no new run starts "
                "until it can"
            )
        self.error = exc
        if not idle:
            self.deadline = None
            return
        if self.deadline is None:
            self.deadline = time.monotonic() + _retry_seconds()
        if time.monotonic() >= self.deadline:
            raise exc

    def started(self) -> None:
        if self.error is not None:
            self.observer.note("runs start again: the sweep goes on")
        self.error, self.deadline = None, None


def _retry_seconds() -> float:
    try:
        return max(0.0, float(os.environ["WORKLOADS_SWEEP_DB_RETRY_S"]))
    except (KeyError, ValueError):
        return DB_RETRY_SECONDS
