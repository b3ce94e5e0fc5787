"""Timed steps wait for their results: a step that sleeps on the device side is timed in full.

TensorFlow's asynchronous executor stands in for a GPU here: with it, calling a
compiled step returns as soon as the work is queued, exactly as a GPU step does,
and a ``numpy_function`` sleep inside the step plays the kernel that takes known
time. A timer that reads the clock when the call returns would see only dispatch.
The assertions are lower bounds (a loaded machine only makes steps longer).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from workloads.cifar10.timing import StepTimer

SLEEP_S = 0.15


@pytest.fixture
def async_executor() -> Iterator[Any]:
    """Switch TensorFlow eager execution to asynchronous for one test, then back."""
    import tensorflow as tf

    tf.config.experimental.set_synchronous_execution(False)
    try:
        yield tf
    finally:
        from tensorflow.python.eager import context

        context.async_wait()
        tf.config.experimental.set_synchronous_execution(True)


def sleepy_model(tf: Any) -> Any:
    """A Dense model whose forward pass also runs a host-side sleep the step must wait for."""
    import keras

    def sleep(x: np.ndarray) -> np.ndarray:
        time.sleep(SLEEP_S)
        return x

    class Sleep(keras.layers.Layer):
        def call(self, x: Any) -> Any:
            slept = tf.numpy_function(sleep, [x], tf.float32, stateful=True)
            return x + 0.0 * tf.reduce_sum(tf.stop_gradient(slept))

    inputs = keras.Input((4,))
    outputs = keras.layers.Dense(10)(Sleep()(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def test_custom_loop_times_the_whole_step_not_its_dispatch(async_executor: Any) -> None:
    from workloads.cifar10.multiworker import fit_custom_loop

    tf = async_executor
    x = np.ones((8, 4), dtype=np.float32)
    y = np.zeros((8,), dtype=np.int32)
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat()
    timer = StepTimer(global_batch=8, log_every=0, announce_epochs=False)
    fit_custom_loop(
        sleepy_model(tf),
        tf.distribute.get_strategy(),
        dataset,
        epochs=2,
        steps=3,
        global_batch=8,
        timer=timer,
    )
    steps = [t for epoch in timer.epochs for t in epoch]
    assert len(steps) == 6
    assert min(steps) >= SLEEP_S, f"a step was timed at {min(steps):.3f} s: dispatch only"


def test_fit_times_the_whole_step_not_its_dispatch(async_executor: Any) -> None:
    tf = async_executor
    x = np.ones((8, 4), dtype=np.float32)
    y = np.zeros((8,), dtype=np.int32)
    timer = StepTimer(global_batch=8, log_every=0, announce_epochs=False)
    model = sleepy_model(tf)
    model.fit(
        tf.data.Dataset.from_tensors((x, y)).repeat(),
        epochs=1,
        steps_per_epoch=3,
        callbacks=[timer],
        verbose=0,
    )
    assert min(timer.epochs[0]) >= SLEEP_S


def test_steps_per_execution_shares_one_call_between_its_steps() -> None:
    ticks = iter([0.0, 1.0, 3.0])
    timer = StepTimer(global_batch=4, log_every=0, announce_epochs=False, clock=lambda: next(ticks))
    timer.on_epoch_begin(0)
    timer.on_train_batch_begin(0)
    timer.on_train_batch_end(3, {"loss": 1.0})  # four steps in one call
    timer.on_train_batch_begin(4)
    timer.on_train_batch_end(4, {"loss": 1.0})
    assert timer.epochs == [[0.25, 0.25, 0.25, 0.25, 2.0]]
