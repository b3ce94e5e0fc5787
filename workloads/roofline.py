"""How far a run is from what the device can do: FLOPs per example, measured peak, MFU.

``flops_per_example`` is counted from the model itself, for one training step
(forward pass, loss and the gradients of every trainable weight; the optimizer's
few operations per weight are left out), by the backend's own cost analysis:

* TensorFlow: the FLOP statistics TensorFlow registers per op (those its
  profiler's ``float_operation`` view sums: MatMul, Conv2D and their backprops,
  BiasAdd, pooling, the loss ops), summed over the traced gradient step's graph,
  counting only the ops its outputs need;
* JAX: XLA's ``cost_analysis()`` of the lowered gradient step (no second compile),
  or of the compiled one where the lowered program has none (GPU backends answer
  ``None`` for the lowered program; the compiled executable's analysis has the count);
* PyTorch: ``torch.utils.flop_counter.FlopCounterMode`` over forward + backward.

The backends do not agree exactly, and the record names the method: TensorFlow
counts no element-wise activations, XLA counts them but leaves out the products
with the zero padding of ``same`` convolutions (the CNN: 107 M TensorFlow, 105 M
torch and by hand, 88 M XLA per example).

The measured peak: a square matmul microbenchmark in the run's compute dtype,
the best of a few rounds, once per device, backend and dtype, cached in
``$WORKLOADS_CACHE/peak-flops.json`` (or ``$WORKLOADS_PEAK_CACHE``). Each
measurement is bracketed by load readings (:mod:`workloads.busy`): one taken while
other processes used the CPU or the GPU is kept only as *provisional* and measured
again next time, so a busy moment never becomes the denominator for good.

``mfu`` (model FLOPs utilisation) is achieved FLOP/s divided by a peak. Which peak
(:func:`mfu_peak`): for a GPU in the reference table (``workloads/hardware/reference.yaml``)
the datasheet's dense peak of the math the run uses, as the field defines MFU, with
the measured peak beside it; elsewhere (CPUs, unknown GPUs) the measured one. Every
record says which (``peak.source``: ``datasheet``, ``measured`` or ``provisional``)
and when it was measured.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from workloads import busy
from workloads.bounded import read_json
from workloads.records import atomic_write_bytes

PEAK_MATRIX = 2048
PEAK_REPEATS = 4
PEAK_ROUNDS = 3
CACHE_NAME = "peak-flops.json"
PEAK_CACHE_MAX_BYTES = 1 << 20  # a few hundred bytes per device, backend and dtype


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
    return xla_flops(jax.jit(jax.grad(objective)).lower(trainable, x, y))


def xla_flops(lowered: Any) -> float:
    """FLOPs XLA counts for a lowered JAX program: the lowered analysis, else the compiled one.

    The lowered program's analysis costs no compile, and the CPU backend answers it;
    GPU backends answer ``None`` there (seen on an H200 with JAX 0.11), while the
    compiled executable's ``cost_analysis()`` has the count. Older JAX returns a list
    with one dict per module. No count from either is an error, never a zero.
    """
    for analysis in (lambda: lowered.cost_analysis(), lambda: lowered.compile().cost_analysis()):
        value = _flops_of(analysis())
        if value is not None:
            return value
    raise RuntimeError("XLA's cost analysis has no FLOP count for this program")


def _flops_of(analysis: Any) -> float | None:
    if isinstance(analysis, list | tuple):
        analysis = analysis[0] if analysis else None
    if not isinstance(analysis, dict):
        return None
    flops = analysis.get("flops")
    return float(flops) if isinstance(flops, int | float) and flops > 0 else None


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
        return xla_flops(lowered), "xla cost_analysis"
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
    host, so the figure is the device's time, not the dispatch's. The operands are
    drawn on the device (seeded): drawing 8192² normals on the host took longer than
    the measurement itself.
    """
    from keras import ops, random

    a = ops.cast(random.normal((size, size), seed=0), dtype)
    b = ops.cast(random.normal((size, size), seed=1), dtype)
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


# The probe that brackets each measurement; tests replace it with recorded readings.
load_probe: Callable[[], busy.Probe] = busy.Probe


def is_provisional(entry: dict[str, Any]) -> bool:
    """True unless the entry says it was measured on an idle device (`"provisional": false`)."""
    return entry.get("provisional") is not False


def better_peak(previous: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """Which of two measurements of one peak to keep.

    An idle measurement beats a provisional one whatever the figures (the busy one
    is low for a reason that says nothing about the device); between two of the
    same kind the higher wins (a shared device measures low, never high). An entry
    without the flag was cached before measurements were checked for other load, so
    nothing says it was idle: it counts as provisional (`is_provisional`).
    """
    if previous is None or "flops" not in previous:
        return new
    old_busy, new_busy = is_provisional(previous), is_provisional(new)
    if old_busy != new_busy:
        return previous if new_busy else new
    return previous if float(previous["flops"]) >= float(new["flops"]) else new


def peak_flops(device: str, dtype: str, *, refresh: bool = False) -> dict[str, Any]:
    """The cached peak for ``device`` and ``dtype``; measured if absent, provisional or ``refresh``.

    ``device`` is the name the record gives the device; the cache key adds the
    Keras backend, whose matmul kernel is what a run of that backend gets. The
    entry says whether it is ``provisional`` (measured while busy, and why).
    """
    import keras

    key = f"{keras.backend.backend()}|{device}|{dtype}"
    path = cache_path()
    try:
        cache = read_json(path, PEAK_CACHE_MAX_BYTES)
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    previous = cache.get(key) if isinstance(cache.get(key), dict) else None
    if not refresh and previous and "flops" in previous and not is_provisional(previous):
        return dict(previous, cached=True)
    from workloads.records import utc_now

    probe = load_probe()
    token = probe.start()
    measured = matmul_rate(dtype)
    reading = probe.stop(token)
    reason = busy.busy_reason(reading)
    entry = {
        "flops": measured,
        "dtype": dtype,
        "device": device,
        "backend": keras.backend.backend(),
        "matrix": PEAK_MATRIX,
        "measured_at": utc_now(),
        "load_average": reading.load_average,
        "load": reading.as_dict(),
        "provisional": reason is not None,
        "busy_reason": reason,
    }
    kept = better_peak(previous, entry)
    if kept is not entry:
        return dict(kept, cached=True)
    cache[key] = entry
    with contextlib.suppress(OSError):  # a read-only cache costs a re-measurement next time
        atomic_write_bytes(path, (json.dumps(cache, indent=2) + "\n").encode())
    return dict(entry, cached=False)


def effective_dtype(dtype: str) -> str:
    """The math a ``dtype`` matmul runs in: float32 is TF32 where the backend turns it on.

    TensorFlow (``enable_tensor_float_32_execution``, on by default) and JAX (its
    default matmul precision) compute float32 matmuls and convolutions in TF32 on
    GPUs that have it; the MFU of such a run is against the TF32 peak.
    """
    if dtype != "float32":
        return dtype
    import sys

    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.config.experimental.tensor_float_32_execution_enabled():
        return "tensorfloat32"
    jax = sys.modules.get("jax")
    if jax is not None and jax.config.jax_default_matmul_precision in (None, "default"):
        return "tensorfloat32"
    return "float32"


def mfu_peak(device: str, dtype: str) -> dict[str, Any]:
    """The denominator of a record's MFU, with what it is and when it was measured.

    ``{"source": "datasheet"|"measured"|"provisional", "value", "dtype", "measured_at",
    "document", "measured": {...}}``: the datasheet's dense peak for a GPU in the
    reference table (TF32's when float32 runs as TF32), else the measured peak;
    the measured one is always beside it.
    """
    from workloads.hardware.identify import datasheet_matmul

    measured = peak_flops(device, dtype)
    beside = {
        "value": measured["flops"],
        "dtype": dtype,
        "measured_at": measured.get("measured_at"),
        "provisional": is_provisional(measured),
        "busy_reason": measured.get("busy_reason"),
    }
    sheet = datasheet_matmul(device, dtype, effective_dtype(dtype))
    if sheet is not None:
        value, math, document = sheet
        return {"source": "datasheet", "value": value, "dtype": math, "document": document,
                "measured_at": beside["measured_at"], "measured": beside}
    return {
        "source": "provisional" if beside["provisional"] else "measured",
        "value": beside["value"],
        "dtype": dtype,
        "document": None,
        "measured_at": beside["measured_at"],
        "measured": beside,
    }


def compute_dtype(policy: str) -> str:
    """The matmul dtype a Keras dtype policy computes in (``mixed_bfloat16`` → ``bfloat16``)."""
    return policy.split("_", 1)[1] if policy.startswith("mixed_") else policy


def peak_note(mfu_value: float | None, peak: dict[str, Any] | float | None = None) -> str | None:
    """A warning for an MFU against a provisional peak, or above 100 % (a peak measured busy)."""
    if isinstance(peak, dict) and peak.get("source") == "provisional":
        why = peak.get("measured", {}).get("busy_reason") or "the host was busy"
        return (
            f"MFU against a provisional matmul peak ({why} while it was measured): read it "
            "as an upper bound; the peak is measured again on the next run"
        )
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
