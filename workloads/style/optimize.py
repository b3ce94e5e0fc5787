"""The optimisation: one compiled Adam step per backend, and the monitored loop around it.

Speed rules, from the keras-io example's slow spots: the content and style targets
are computed once before the loop; one call does forward, backward and the Adam
update (``tf.function``, XLA with ``--xla``; ``jax.jit`` with the state donated;
eager autograd on PyTorch); the image and the optimiser state stay on the device;
the loss terms come back to the host only every ``print_every`` iterations, as
one small array, so the device never waits for Python in between.

Adam is written out in ``keras.ops`` (TensorFlow's AdamOptimizer formulation, as
neural-style used it) because a pure function of the state compiles the same way
on every backend; only the gradient call differs per backend.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np
from keras import ops

from workloads.style import losses
from workloads.style.config import ADAM_BETA1, ADAM_BETA2, ADAM_EPSILON
from workloads.style.progress import Reporter

# Loss terms, in the order of the vector every step returns. Weighted, so that
# total == content + style + tv (what neural-style prints).
TERMS = ("total", "content", "style", "tv")

State = tuple[Any, ...]
LossFn = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Objective:
    """The fixed parts of the loss: targets computed once, and every weight."""

    content_targets: Sequence[Any]
    style_grams: Sequence[Sequence[Any]]
    layer_weights: Sequence[float]
    blend_weights: Sequence[float]
    content_blend: float
    content_weight: float
    style_weight: float
    tv_weight: float


def feature_fn(extractor: Any) -> tuple[Callable[[Any, Any], list[Any]], Any]:
    """``(features(weights, image), weights)`` for the current backend.

    On JAX the weights are passed into the jitted function as arguments
    (``stateless_call``) instead of being baked into the program as 80 MB of
    constants; on TensorFlow and PyTorch the model's variables are used directly.
    """
    if keras.backend.backend() == "jax":
        weights = (
            [v.value for v in extractor.trainable_variables],
            [v.value for v in extractor.non_trainable_variables],
        )

        def stateless(w: Any, image: Any) -> list[Any]:
            outputs, _ = extractor.stateless_call(w[0], w[1], image, training=False)
            return list(outputs)

        return stateless, weights

    def direct(_: Any, image: Any) -> list[Any]:
        return list(extractor(image, training=False))

    return direct, None


def loss_fn(features: Callable[[Any, Any], list[Any]], objective: Objective) -> LossFn:
    """``terms(weights, image)`` → the vector (total, content, style, tv), weighted."""
    n_content = len(objective.content_targets)

    def terms(weights: Any, image: Any) -> Any:
        outputs = features(weights, image)
        content = objective.content_weight * losses.content_loss(
            outputs[:n_content], objective.content_targets, objective.content_blend
        )
        style = objective.style_weight * losses.style_loss(
            outputs[n_content:],
            objective.style_grams,
            objective.layer_weights,
            objective.blend_weights,
        )
        tv = objective.tv_weight * losses.tv_loss(image)
        return ops.stack([content + style + tv, content, style, tv])

    return terms


def initial_state(image: np.ndarray, keep_best: bool) -> State:
    """(image, m, v, t[, best_image, best_loss]) as backend tensors on the default device."""
    x = ops.convert_to_tensor(image.astype(np.float32))
    state: list[Any] = [x, ops.zeros_like(x), ops.zeros_like(x), ops.convert_to_tensor(0.0)]
    if keep_best:
        state += [ops.copy(x), ops.convert_to_tensor(np.float32(np.inf))]
    return tuple(state)


def advance(state: State, grad: Any, terms: Any, learning_rate: float) -> tuple[State, Any]:
    """One Adam update; with best-tracking, remember the image ``terms`` belongs to."""
    image, m, v, t = state[:4]
    t = t + 1.0
    m = ADAM_BETA1 * m + (1.0 - ADAM_BETA1) * grad
    v = ADAM_BETA2 * v + (1.0 - ADAM_BETA2) * ops.square(grad)
    alpha = (
        learning_rate * ops.sqrt(1.0 - ops.power(ADAM_BETA2, t)) / (1.0 - ops.power(ADAM_BETA1, t))
    )
    updated = image - alpha * m / (ops.sqrt(v) + ADAM_EPSILON)
    new: list[Any] = [updated, m, v, t]
    if len(state) > 4:
        best_image, best_loss = state[4:6]
        better = terms[0] < best_loss
        new += [ops.where(better, image, best_image), ops.minimum(terms[0], best_loss)]
    return tuple(new), terms


def build_step(
    terms: LossFn, weights: Any, learning_rate: float, xla: bool
) -> Callable[[State], tuple[State, Any]]:
    """The compiled ``step(state) -> (state, terms)`` for the current Keras backend.

    ``terms`` are those of the image *before* the update, which the gradient needs
    anyway, so monitoring costs no extra forward pass.
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def tf_step(state: State) -> tuple[State, Any]:
            with tf.GradientTape() as tape:
                tape.watch(state[0])
                values = terms(weights, state[0])
                total = values[0]  # inside the tape: the slice must be recorded too
            grad = tape.gradient(total, state[0])
            return advance(state, grad, values, learning_rate)

        return tf.function(tf_step, jit_compile=xla, reduce_retracing=True)
    if backend == "jax":
        import jax

        def total(w: Any, image: Any) -> tuple[Any, Any]:
            values = terms(w, image)
            return values[0], values

        def jax_step(w: Any, state: State) -> tuple[State, Any]:
            (_, values), grad = jax.value_and_grad(total, argnums=1, has_aux=True)(w, state[0])
            return advance(state, grad, values, learning_rate)

        compiled = jax.jit(jax_step, donate_argnums=1)
        return lambda state: compiled(weights, state)
    if backend == "torch":
        import torch

        def torch_step(state: State) -> tuple[State, Any]:
            image = state[0].detach().requires_grad_(True)
            values = terms(weights, image)
            (grad,) = torch.autograd.grad(values[0], image)
            with torch.no_grad():
                return advance((image.detach(), *state[1:]), grad, values.detach(), learning_rate)

        return torch_step
    raise RuntimeError(f"unsupported Keras backend {backend!r}")


def build_evaluate(terms: LossFn, weights: Any) -> Callable[[Any], Any]:
    """``evaluate(image) -> terms`` without gradients, for the last image's loss."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(lambda image: terms(weights, image))
    if backend == "jax":
        import jax

        compiled = jax.jit(terms)
        return lambda image: compiled(weights, image)
    import torch

    def torch_evaluate(image: Any) -> Any:
        with torch.no_grad():
            return terms(weights, image)

    return torch_evaluate


def converged_at(totals: Sequence[float], tolerance: float, window: int, start: int) -> int | None:
    """First iteration ``i >= start`` where |L[i] − L[i−window]| / |L[i−window]| < tolerance."""
    for i in range(max(start, window), len(totals)):
        before = totals[i - window]
        if before != 0 and abs(totals[i] - before) / abs(before) < tolerance:
            return i
    return None


@dataclass
class LoopResult:
    """History row ``i`` is the loss of the image after ``i`` updates (row 0: the start)."""

    history: list[list[float]] = field(default_factory=list)
    iterations_run: int = 0
    converged_at: int | None = None
    first_step_s: float = 0.0  # includes tracing and compilation
    steady_s: float = 0.0  # steps 2..N, checkpoint writing excluded
    total_s: float = 0.0  # start of the loop to the end of the last step
    checkpoint_s: float = 0.0
    state: State = ()

    @property
    def iterations_per_sec(self) -> float | None:
        """Steady-state rate: the first (compiling) step is left out when there are others."""
        if self.iterations_run > 1 and self.steady_s > 0:
            return (self.iterations_run - 1) / self.steady_s
        if self.first_step_s > 0:
            return self.iterations_run / self.first_step_s
        return None


def run_loop(
    step: Callable[[State], tuple[State, Any]],
    evaluate: Callable[[Any], Any],
    state: State,
    iterations: int,
    *,
    print_every: int = 10,
    tolerance: float | None = None,
    window: int = 50,
    checkpoint_every: int | None = None,
    on_checkpoint: Callable[[int, Any], None] | None = None,
    reporter: Reporter | None = None,
) -> LoopResult:
    """Run up to ``iterations`` steps; stop early once the total loss has converged.

    Convergence is checked when the losses reach the host (every ``print_every``
    steps), so a run stops at the first such point after ``converged_at``.
    """
    reporter = reporter or Reporter()
    result = LoopResult()
    pending: list[Any] = []
    checked = 0
    reporter.start(iterations)
    begin = steady_begin = time.perf_counter()
    for done in range(1, iterations + 1):
        state, values = step(state)
        if done == 1:
            result.history.append(_to_rows([values])[0])
            result.first_step_s = time.perf_counter() - begin
            steady_begin = time.perf_counter()
        else:
            pending.append(values)
        result.iterations_run = done
        at_checkpoint = bool(checkpoint_every) and done % (checkpoint_every or 1) == 0
        if done % print_every and not at_checkpoint and done != iterations:
            continue
        if pending:
            result.history.extend(_to_rows(pending))
            pending = []
        reporter.progress(done, result.history)
        if at_checkpoint and on_checkpoint is not None:
            started = time.perf_counter()
            on_checkpoint(done, state[0])
            result.checkpoint_s += time.perf_counter() - started
        if tolerance is not None and result.converged_at is None:
            totals = [row[0] for row in result.history]
            result.converged_at = converged_at(totals, tolerance, window, checked)
            checked = len(totals)
            if result.converged_at is not None:
                break
    end = time.perf_counter()  # the last step's losses are on the host: it has finished
    result.total_s = end - begin - result.checkpoint_s
    if result.iterations_run > 1:
        result.steady_s = end - steady_begin - result.checkpoint_s
    result.history.append(_to_rows([evaluate(state[0])])[0])
    result.state = state
    reporter.finish()
    return result


def _to_rows(values: list[Any]) -> list[list[float]]:
    """Device loss vectors → host rows, in one transfer."""
    stacked = ops.convert_to_numpy(ops.stack(values)) if len(values) > 1 else None
    if stacked is None:
        stacked = ops.convert_to_numpy(values[0])[np.newaxis]
    return [[float(x) for x in row] for row in stacked]
