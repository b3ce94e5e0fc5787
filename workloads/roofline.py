"""How far a run is from what the device can do: FLOPs per example, measured peak, MFU.

``flops_per_example`` is counted from the model itself, for one training step
(forward pass, loss and the gradients of every trainable weight; the optimizer's
few operations per weight are left out), by the backend's own cost analysis:

* TensorFlow: the FLOP statistics TensorFlow registers per op (those its
  profiler's ``float_operation`` view sums: MatMul, Conv2D and their backprops,
  BiasAdd, pooling, the loss ops), summed over the traced gradient step's graph,
  counting only the ops its outputs need;
* JAX: XLA's ``cost_analysis()`` of the lowered gradient step (no second compile);
* PyTorch: ``torch.utils.flop_counter.FlopCounterMode`` over forward + backward.

The backends do not agree exactly, and the record names the method: TensorFlow
counts no element-wise activations, XLA counts them but leaves out the products
with the zero padding of ``same`` convolutions (the CNN: 107 M TensorFlow, 105 M
torch and by hand, 88 M XLA per example).

``peak_flops`` is measured, never looked up: a square matmul microbenchmark in
the run's compute dtype, the best of a few rounds, once per device, backend and
dtype, cached in ``$WORKLOADS_CACHE/peak-flops.json`` (or ``$WORKLOADS_PEAK_CACHE``).
``mfu`` (model FLOPs utilisation) is achieved FLOP/s divided by that peak.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workloads.records import atomic_write_bytes

PEAK_MATRIX = 2048
PEAK_REPEATS = 4
PEAK_ROUNDS = 3
CACHE_NAME = "peak-flops.json"


def cache_path() -> Path:
    """``$WORKLOADS_PEAK_CACHE``, else ``$WORKLOADS_CACHE/peak-flops.json`` (~/.cache/workloads).

    The peaks are a property of the machine, not of a data set: a separate
    variable lets a fresh data cache (tests, a new mirror) keep the measured peaks.
    """
    explicit = os.environ.get("WORKLOADS_PEAK_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("WORKLOADS_CACHE", Path.home() / ".cache" / "workloads"))
    return base / CACHE_NAME


# --- FLOPs per training example ---------------------------------------------------------


def training_flops(model: Any, batch: int, loss: Callable[[Any, Any], Any]) -> tuple[float, str]:
    """FLOPs of one training step of ``model`` on ``batch`` examples, and how they were counted.

    ``loss(labels, outputs)`` is the training loss; labels are sparse class ids.
    Regularisation losses (``model.losses``) are included, as ``fit`` adds them.
    """
    import keras

    backend = keras.backend.backend()
    shape = (batch, *model.input_shape[1:])
    if backend == "tensorflow":
        return _tensorflow_flops(model, shape, loss), "tensorflow registered op flops"
    if backend == "jax":
        return _jax_flops(model, shape, loss), "xla cost_analysis"
    if backend == "torch":
        return _torch_flops(model, shape, loss), "torch FlopCounterMode"
    raise RuntimeError(f"no FLOP counter for the Keras backend {backend!r}")


def flops_per_example(
    model: Any, loss: Callable[[Any, Any], Any], batch: int = 8
) -> tuple[float, str]:
    """:func:`training_flops` divided by the batch it was counted at."""
    total, method = training_flops(model, batch, loss)
    return total / batch, method


def _tensorflow_flops(model: Any, shape: tuple[int, ...], loss: Callable[[Any, Any], Any]) -> float:
    import tensorflow as tf

    @tf.function
    def step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            value = loss(y, model(x, training=True))
            if model.losses:
                value += tf.add_n(model.losses)
        return tape.gradient(value, model.trainable_variables)

    graph = step.get_concrete_function(
        tf.TensorSpec(shape, model.inputs[0].dtype), tf.TensorSpec(shape[:1], tf.int32)
    ).graph
    return _graph_flops(graph)


def tensorflow_function_flops(fn: Callable[..., Any], *args: Any) -> float:
    """FLOPs of the TensorFlow graph ``fn(*args)`` traces to (``args`` as in a real call)."""
    import tensorflow as tf

    return _graph_flops(tf.function(fn).get_concrete_function(*args).graph)


def _graph_flops(graph: Any) -> float:
    """Sum TensorFlow's registered per-op FLOP statistics over the ops the outputs need.

    Only ops the step's outputs depend on are counted, as the runtime's pruning
    would run them: a gradient function may build an op whose result nobody uses
    (Conv2D's builds the input gradient of the first layer, whose input is data).
    """
    from tensorflow.python.framework import ops as tf_ops

    pending = [t.op for t in graph.outputs]
    seen: set[str] = set()
    total = 0
    while pending:
        op = pending.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        pending.extend(t.op for t in op.inputs)
        pending.extend(op.control_inputs)
        try:
            value = tf_ops.get_stats_for_node_def(graph, op.node_def, "flops").value
        except ValueError:  # an op TensorFlow registers no statistics for
            value = None
        total += value or 0
    return float(total)


def _jax_flops(model: Any, shape: tuple[int, ...], loss: Callable[[Any, Any], Any]) -> float:
    import jax
    import jax.numpy as jnp

    trainable = [v.value for v in model.trainable_variables]
    fixed = [v.value for v in model.non_trainable_variables]

    def objective(weights: Any, x: Any, y: Any) -> Any:
        outputs, _ = model.stateless_call(weights, fixed, x, training=True)
        return loss(y, outputs)

    x = jnp.zeros(shape, model.inputs[0].dtype)
    y = jnp.zeros(shape[:1], jnp.int32)
    # The lowered program's analysis: the same count without a second XLA compile.
    analysis: Any = jax.jit(jax.grad(objective)).lower(trainable, x, y).cost_analysis()
    if isinstance(analysis, list):  # older JAX: one dict per module
        analysis = analysis[0]
    return float(analysis["flops"])


def _torch_flops(model: Any, shape: tuple[int, ...], loss: Callable[[Any, Any], Any]) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.zeros(shape)
    y = torch.zeros(shape[:1], dtype=torch.int64)
    with FlopCounterMode(display=False) as counter:
        value = loss(y, model(x, training=True))
        value.backward()
    if hasattr(model, "zero_grad"):  # leave no gradients behind on the model's weights
        model.zero_grad()
    return float(counter.get_total_flops())


def gradient_flops(fn: Callable[[Any, Any], Any], x: Any, aux: Any) -> tuple[float, str]:
    """FLOPs of ``fn(aux, x)`` (a scalar) and its gradient with respect to ``x``.

    Style transfer's iteration: the loss of the image and its gradient through
    VGG (``aux`` is what the backend's loss function takes besides the image:
    the weights on JAX, nothing elsewhere). The Adam update, a dozen element-wise
    operations per pixel, is left out as the optimizer is for ``cifar10``.
    """
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        @tf.function
        def step(image: Any) -> Any:
            with tf.GradientTape() as tape:
                tape.watch(image)
                value = fn(aux, image)
            return value, tape.gradient(value, image)

        graph = step.get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
        return _graph_flops(graph), "tensorflow registered op flops"
    if backend == "jax":
        import jax

        lowered = jax.jit(jax.value_and_grad(lambda image, a: fn(a, image))).lower(x, aux)
        analysis: Any = lowered.cost_analysis()
        if isinstance(analysis, list):
            analysis = analysis[0]
        return float(analysis["flops"]), "xla cost_analysis"
    if backend == "torch":
        from torch.utils.flop_counter import FlopCounterMode

        image = x.detach().clone().requires_grad_(True)
        with FlopCounterMode(display=False) as counter:
            fn(aux, image).backward()
        return float(counter.get_total_flops()), "torch FlopCounterMode"
    raise RuntimeError(f"no FLOP counter for the Keras backend {backend!r}")


# --- measured peak --------------------------------------------------------------------------


def matmul_rate(
    dtype: str, size: int = PEAK_MATRIX, repeats: int = PEAK_REPEATS, rounds: int = PEAK_ROUNDS
) -> float:
    """Best FLOP/s of ``repeats`` back-to-back ``size``² matmuls in ``dtype`` on the default device.

    The clock stops only after a scalar computed from the last product is on the
    host, so the figure is the device's time, not the dispatch's.
    """
    import numpy as np
    from keras import ops

    rng = np.random.default_rng(0)
    a = ops.cast(ops.convert_to_tensor(rng.standard_normal((size, size), dtype=np.float32)), dtype)
    b = ops.cast(ops.convert_to_tensor(rng.standard_normal((size, size), dtype=np.float32)), dtype)
    float(ops.sum(ops.cast(ops.matmul(a, b), "float32")))  # warm-up: kernels chosen, memory paged
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        c = a
        for _ in range(repeats):
            c = ops.matmul(a, b)
        float(ops.sum(ops.cast(c[:1, :1], "float32")))
        seconds = time.perf_counter() - start
        best = max(best, repeats * 2 * size**3 / seconds)
    return best


def peak_flops(device: str, dtype: str, *, refresh: bool = False) -> dict[str, Any]:
    """The cached peak for ``device`` and ``dtype``; measured now if absent (or ``refresh``).

    A re-measurement replaces the cached figure only when it is higher: a peak
    measured while other work shared the device is too low, never too high, so
    the best one seen is the closest to the device's real peak.
    ``device`` is the name the record gives the device; the cache key adds the
    Keras backend, whose matmul kernel is what a run of that backend gets.
    """
    import keras

    key = f"{keras.backend.backend()}|{device}|{dtype}"
    path = cache_path()
    try:
        cache = json.loads(path.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    if not refresh and isinstance(cache.get(key), dict) and "flops" in cache[key]:
        return dict(cache[key], cached=True)
    from workloads.records import utc_now

    measured = matmul_rate(dtype)
    previous = cache.get(key) if isinstance(cache.get(key), dict) else None
    if previous and float(previous.get("flops", 0)) >= measured:
        return dict(previous, cached=True)  # a peak only rises: keep the best measurement
    entry = {
        "flops": measured,
        "dtype": dtype,
        "device": device,
        "backend": keras.backend.backend(),
        "matrix": PEAK_MATRIX,
        "measured_at": utc_now(),
        "load_average": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    cache[key] = entry
    with contextlib.suppress(OSError):  # a read-only cache costs a re-measurement next time
        atomic_write_bytes(path, (json.dumps(cache, indent=2) + "\n").encode())
    return dict(entry, cached=False)


def compute_dtype(policy: str) -> str:
    """The matmul dtype a Keras dtype policy computes in (``mixed_bfloat16`` → ``bfloat16``)."""
    return policy.split("_", 1)[1] if policy.startswith("mixed_") else policy


def peak_note(mfu_value: float | None, peak: dict[str, Any] | float | None = None) -> str | None:
    """A warning for an MFU above 100 %: the cached peak was measured on a busy device."""
    if mfu_value is None or mfu_value <= 1.0:
        return None
    load = peak.get("load_average") if isinstance(peak, dict) else None
    when = f" (load average {load:.1f} then)" if isinstance(load, (int, float)) else ""
    return (
        f"MFU {mfu_value:.0%} exceeds the cached matmul peak{when}: it was measured on a busy "
        "device; re-measure on an idle one with `workloads check --refresh-peak`"
    )


def mfu(examples_per_sec: float, flops_per_example: float, peak: float) -> float | None:
    """Achieved FLOP/s over the measured peak, or None when either is unknown."""
    if not (examples_per_sec and flops_per_example and peak):
        return None
    return examples_per_sec * flops_per_example / peak
