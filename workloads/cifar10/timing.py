"""Per-step timing as a Keras callback, and the steady-state statistics of a run.

Timing the gap between consecutive ``on_train_batch_end`` calls measures what a
user waits for, including input pipeline stalls. The clock is read only after the
step's results are on the host: a GPU (or TensorFlow's async executor) returns
from a step call as soon as the work is queued, so a timer that read the clock
on return would time dispatch, not the step. ``fit`` converts its logs before
calling back; a custom loop passes tensors, which the timer waits for itself.
With ``steps_per_execution`` one callback covers several steps: each of them is
recorded as an equal share of the call. The first epoch (graph tracing,
XLA compilation, autotuning, cuDNN algorithm search) is reported but excluded
from the steady-state figures, as seed 002 did; a one-epoch run drops its first
tenth of steps instead.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

import keras


def progress_line(step: int, loss: float, examples_per_sec: float, sec_per_batch: float) -> str:
    """Seed 001's line: ``step 230, loss = 3.72 (595.8 examples/sec; 0.215 sec/batch)``."""
    return (
        f"step {step}, loss = {loss:.2f} "
        f"({examples_per_sec:.1f} examples/sec; {sec_per_batch:.3f} sec/batch)"
    )


@dataclass
class StepTimer(keras.callbacks.Callback):
    """Records every step's duration per epoch and prints progress every ``log_every`` steps."""

    global_batch: int
    log_every: int = 10
    announce_epochs: bool = True
    stream: TextIO = field(default_factory=lambda: sys.stdout)
    clock: Callable[[], float] = time.perf_counter
    epochs: list[list[float]] = field(default_factory=list)
    epoch_times: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__()
        self._step = 0
        self._last = 0.0
        self._epoch_start = 0.0
        self._begin: int | None = None

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self.epochs.append([])
        self._epoch_start = self._last = self.clock()

    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self._begin = batch

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        values = wait_for(logs or {})
        now = self.clock()
        steps = batch - self._begin + 1 if self._begin is not None else 1
        self._begin = None
        duration = (now - self._last) / max(1, steps)
        self._last = now
        for _ in range(max(1, steps)):
            self.epochs[-1].append(duration)
            self._step += 1
            if self.log_every and self._step % self.log_every == 0:
                print(
                    progress_line(
                        self._step,
                        values.get("loss", float("nan")),
                        self.global_batch / duration,
                        duration,
                    ),
                    file=self.stream,
                    flush=True,
                )

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        elapsed = self.clock() - self._epoch_start
        self.epoch_times.append(elapsed)
        loss = float((logs or {}).get("loss", float("nan")))
        self.losses.append(loss)
        steps = len(self.epochs[-1])
        rate = steps * self.global_batch / elapsed if elapsed > 0 else float("nan")
        if not self.announce_epochs:
            return
        note = "  (warm-up: left out of the steady-state figures)" if epoch == 0 else ""
        print(
            f"epoch {epoch + 1}: {elapsed:.2f} s, {steps} steps, loss = {loss:.3f}, "
            f"{rate:.1f} examples/sec{note}",
            file=self.stream,
            flush=True,
        )


class EpochTimer(keras.callbacks.Callback):
    """Wall time of each epoch, and nothing per step: the steps run as ``fit`` runs them.

    :class:`StepTimer` reads every step's loss, which makes Keras call every callback
    synchronously and the host wait for each step before dispatching the next; on JAX
    that sync cost 35 % of ResNet50V2's throughput on an H200 (7,081 examples/s against
    10,813 for a plain ``fit``). This timer is ``async_safe`` and has no per-batch hook, so
    Keras keeps dispatching ahead; it waits once per epoch, for the epoch's last loss,
    before it reads the clock, so an epoch's time includes all of its work.
    """

    async_safe = True

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__()
        self.clock = clock
        self.epoch_times: list[float] = []
        self.losses: list[float] = []
        self._start = 0.0

    def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        self._start = self.clock()

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        values = wait_for(logs or {})
        self.epoch_times.append(self.clock() - self._start)
        self.losses.append(values.get("loss", float("nan")))


def steady_epochs(epoch_times: list[float], steps: int, global_batch: int) -> SteadyState:
    """Examples/s over every epoch after the first (compilation, autotuning), all steps equal."""
    measured = epoch_times[1:]
    if not measured or steps < 1:
        raise ValueError("the steady state needs two epochs or more of at least one step")
    seconds = sum(measured)
    rate = len(measured) * steps * global_batch / seconds
    return SteadyState(
        seconds / (len(measured) * steps), rate, rate, len(measured) * steps, "first epoch"
    )


def wait_for(logs: dict[str, Any]) -> dict[str, float]:
    """Bring every scalar in ``logs`` to the host, which waits for the step producing it.

    ``float()`` of a TensorFlow, JAX or PyTorch scalar blocks until the value
    exists, on every backend and device; plain numbers pass through.
    """
    values = {}
    for key, value in logs.items():
        try:
            values[key] = float(value)
        except (TypeError, ValueError):
            continue
    return values


@dataclass(frozen=True)
class SteadyState:
    """The figures that go into a record."""

    step_time_s: float
    examples_per_sec: float
    examples_per_sec_mean: float
    steps_measured: int
    excluded: str


def steady_state(epochs: list[list[float]], global_batch: int) -> SteadyState:
    """Median step time over the steady-state steps, and examples/sec from it."""
    if not epochs or not any(epochs):
        raise ValueError("no steps were timed")
    if len(epochs) > 1:
        steps = [t for epoch in epochs[1:] for t in epoch]
        excluded = "first epoch"
    else:
        skip = max(1, len(epochs[0]) // 10) if len(epochs[0]) > 1 else 0
        steps = epochs[0][skip:]
        excluded = f"first {skip} step(s) of the only epoch"
    median = statistics.median(steps)
    mean_rate = len(steps) * global_batch / sum(steps)
    return SteadyState(median, global_batch / median, mean_rate, len(steps), excluded)
