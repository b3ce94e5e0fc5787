"""The battery's training row is timed as ``fit`` runs, with no per-step wait on the host.

Keras calls callbacks asynchronously, and keeps dispatching steps ahead, only when every
callback is ``async_safe`` or has no per-batch hook (``CallbackList._async_train``, decided
by Keras itself, on thread-safe backends such as JAX). The per-step timer reads each
step's loss, so each step waited for the last; on an H200 that cost the training row 35 %
of a plain ``fit``'s throughput. Real Keras and JAX, in a subprocess (the backend is
chosen at import).

The other JAX-only findings of that GPU run are tested where their commands already run
on JAX: ``test_other_keras_backends`` (``workloads cifar10``, synthetic data and its FLOP
count) and ``test_jax_backend_gives_the_same_losses`` (``workloads style``'s FLOP count),
both with :func:`tests.workloads.conftest.jax_only`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.workloads.conftest import REPO, jax_only

EPOCH_TIMER_PROBE = """
import keras
from workloads.cifar10.timing import EpochTimer, StepTimer
for timer in (EpochTimer(), StepTimer(global_batch=8, log_every=0, announce_epochs=False)):
    print(type(timer).__name__, keras.callbacks.CallbackList([timer])._async_train)
"""


def test_the_battery_s_timer_leaves_keras_dispatching_ahead(
    isolated_env: dict[str, str], tmp_path: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", EPOCH_TIMER_PROBE], env=jax_only(isolated_env, tmp_path),
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["EpochTimer", "True", "StepTimer", "False"]


def test_the_battery_trains_with_the_epoch_timer() -> None:
    """The battery's training uses it (read from the source: the run needs a GPU's time)."""
    source = (REPO / "workloads" / "accept" / "training.py").read_text()
    assert "EpochTimer()" in source and "StepTimer" not in source
