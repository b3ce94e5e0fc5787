"""Steady-state statistics and the seed's progress line."""

from __future__ import annotations

import io

import pytest

from workloads.cifar10.timing import StepTimer, progress_line, steady_state


def test_progress_line_has_the_seed_format() -> None:
    assert progress_line(230, 3.7249, 595.83, 0.2151) == (
        "step 230, loss = 3.72 (595.8 examples/sec; 0.215 sec/batch)"
    )


def test_first_epoch_is_excluded() -> None:
    stats = steady_state([[9.0, 9.0], [0.5, 0.25, 0.5]], global_batch=100)
    assert stats.step_time_s == 0.5
    assert stats.examples_per_sec == 200.0
    assert stats.examples_per_sec_mean == pytest.approx(300 / 1.25)
    assert stats.steps_measured == 3 and stats.excluded == "first epoch"


def test_single_epoch_drops_its_first_tenth() -> None:
    stats = steady_state([[10.0] + [1.0] * 19], global_batch=8)
    assert stats.steps_measured == 18 and stats.step_time_s == 1.0


def test_timer_logs_every_n_steps_with_a_fake_clock() -> None:
    ticks = iter([0.0, 0.5, 1.0, 1.5, 2.0, 2.5])
    out = io.StringIO()
    timer = StepTimer(global_batch=10, log_every=2, stream=out, clock=lambda: next(ticks))
    timer.on_epoch_begin(0)
    for step in range(4):
        timer.on_train_batch_end(step, {"loss": 2.0})
    timer.on_epoch_end(0, {"loss": 1.5})
    lines = out.getvalue().splitlines()
    assert lines[0] == "step 2, loss = 2.00 (20.0 examples/sec; 0.500 sec/batch)"
    assert lines[1].startswith("step 4,")
    assert lines[2].startswith("epoch 1: 2.50 s, 4 steps, loss = 1.500")
    assert timer.epochs == [[0.5, 0.5, 0.5, 0.5]]
