"""One style-transfer run: check everything, then load the framework, then optimise.

:func:`prepare` does all that can fail on bad input (images, sizes, memory,
output location, weights file) before a framework is imported, so a typo costs
a second, not a TensorFlow start-up, and nothing is written. :func:`stylize`
then builds the network, computes the fixed targets once and runs the loop.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from workloads.errors import WorkloadError
from workloads.records import ensure_writable
from workloads.style import images, memory
from workloads.style.config import NOISE_SCALE, StyleConfig
from workloads.style.weights import WeightsSource, resolve


@dataclass
class Prepared:
    """Validated inputs at their working sizes, ready for the optimisation."""

    config: StyleConfig
    content: np.ndarray  # RGB uint8 at the output size
    styles: list[np.ndarray]  # RGB uint8, each at its scaled size
    initial: np.ndarray | None  # RGB uint8 at the output size, for --initial PATH
    weights: WeightsSource
    memory_estimate_bytes: int

    @property
    def height(self) -> int:
        return int(self.content.shape[0])

    @property
    def width(self) -> int:
        return int(self.content.shape[1])


def prepare(config: StyleConfig, *, check_memory: bool = True) -> Prepared:
    """Load and size the images, check memory and the output, resolve the weights."""
    config.validate()
    content = images.load_rgb(config.content, "content")
    height, width = images.size_for_width(content.shape, config.width)
    styles = []
    for index, path in enumerate(config.styles):
        style = images.load_rgb(path, "style")
        style_h, style_w = images.style_size(style.shape, width, config.scale_for(index))
        styles.append((style, style_h, style_w))
    initial = None
    if config.initial not in ("none", "content"):
        initial = images.load_rgb(Path(config.initial), "initial")
    style_pixels = sum(h * w for _, h, w in styles)
    estimate = memory.estimate_bytes(height, width, style_pixels)
    if check_memory:
        estimate = memory.check_fits(height, width, style_pixels)
    # Resizing allocates the full-size images: only after the memory check.
    content = images.resize(content, height, width, "content")
    sized_styles = [images.resize(s, h, w, "style") for s, h, w in styles]
    if initial is not None:
        initial = images.resize(initial, height, width, "initial")
    ensure_writable(config.output)
    return Prepared(config, content, sized_styles, initial, resolve(config.weights), estimate)


@dataclass
class Outcome:
    """What a run produced: the output image and how it got there."""

    image: np.ndarray  # RGB uint8, colours preserved if asked
    loop: Any  # optimize.LoopResult
    backend: str
    device: str
    xla: bool
    output_iteration: int
    best_iteration: int | None
    checkpoints: list[Path] = field(default_factory=list)
    precision: str = "float32"  # VGG's features, as resolved from --precision
    roofline: dict[str, Any] = field(default_factory=dict)


_tensorflow_ready = False


def start_backend() -> tuple[str, str]:
    """Import the Keras backend (TensorFlow: memory growth first); return (backend, device)."""
    global _tensorflow_ready
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        from workloads.devices import setup_tensorflow

        gpus = []
        if not _tensorflow_ready:
            # Already initialised by earlier work in this process (a test session,
            # a notebook): memory growth can no longer change, and need not.
            with contextlib.suppress(WorkloadError):
                gpus = setup_tensorflow(tf)
            _tensorflow_ready = True
        logical = tf.config.list_logical_devices("GPU")
        if logical:
            name = gpus[0].name if gpus else logical[0].name
            return backend, f"GPU:0 ({name})"
        return backend, "CPU"
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        if device.platform == "cpu":
            return backend, "CPU"
        return backend, f"{device.platform.upper()}:{device.id} ({device.device_kind})"
    import torch

    if torch.cuda.is_available():
        return backend, f"GPU:0 ({torch.cuda.get_device_name(0)})"
    return backend, "CPU"


def first_image(prepared: Prepared) -> np.ndarray:
    """neural-style's start: (1 − nb)·image + nb·N(0, 1)·0.256, in VGG's pixel space."""
    config = prepared.config
    base = images.preprocess(prepared.initial if prepared.initial is not None else prepared.content)
    blend = config.noiseblend()
    if blend == 0:
        return base
    noise = np.random.default_rng(config.seed).standard_normal(base.shape).astype(np.float32)
    return ((1.0 - blend) * base + blend * NOISE_SCALE * noise).astype(np.float32)


def to_output(prepared: Prepared, tensor: Any) -> np.ndarray:
    """A device image in VGG space → RGB uint8, colours preserved if asked."""
    from keras import ops

    rgb = images.deprocess(ops.convert_to_numpy(tensor))
    if prepared.config.preserve_colors:
        rgb = images.preserve_colors(rgb, prepared.content)
    return rgb


def best_iteration(history: list[list[float]]) -> int | None:
    totals = np.array([row[0] for row in history], dtype=np.float64)
    if not np.isfinite(totals).any():
        return None
    return int(np.nanargmin(np.where(np.isfinite(totals), totals, np.nan)))


def stylize(
    prepared: Prepared,
    reporter: Any = None,
    on_start: Callable[[str, str], None] | None = None,
) -> Outcome:
    """Run the optimisation of ``prepared``; checkpoints are written as it goes."""
    backend, device = start_backend()
    if on_start is not None:
        on_start(backend, device)
    from keras import ops

    from workloads.envinfo import cpu_bf16_flags
    from workloads.style import losses, optimize, vgg
    from workloads.style.config import resolve_precision, style_blend_weights, style_layer_weights

    config = prepared.config
    precision = resolve_precision(config.precision, device, cpu_bf16_flags())
    network = vgg.load_vgg19(prepared.weights, config.seed, precision)
    extractor = vgg.build_extractor(network, config.pooling)
    n_content = len(vgg.CONTENT_LAYERS)
    content_features = extractor(ops.convert_to_tensor(images.preprocess(prepared.content)))
    style_grams = []
    for style in prepared.styles:
        outputs = extractor(ops.convert_to_tensor(images.preprocess(style)))
        style_grams.append([losses.gram(f) for f in outputs[n_content:]])
    objective = optimize.Objective(
        content_targets=list(content_features[:n_content]),
        style_grams=style_grams,
        layer_weights=style_layer_weights(config.style_layer_weight_exp),
        blend_weights=style_blend_weights(config),
        content_blend=config.content_weight_blend,
        content_weight=config.content_weight,
        style_weight=config.style_weight,
        tv_weight=config.tv_weight,
    )
    del content_features
    features, weights = optimize.feature_fn(extractor)
    terms = optimize.loss_fn(features, objective)
    xla = config.xla if backend == "tensorflow" else backend == "jax"
    step = optimize.build_step(terms, weights, config.learning_rate, config.xla)
    evaluate = optimize.build_evaluate(terms, weights)
    keep_best = config.keep == "best"
    state = optimize.initial_state(first_image(prepared), keep_best)
    counted = count_flops(terms, weights, state[0])

    checkpoints: list[Path] = []

    def write_checkpoint(iteration: int, tensor: Any) -> None:
        path = config.checkpoint_path(iteration)
        images.save_png(path, to_output(prepared, tensor))
        checkpoints.append(path)

    loop = optimize.run_loop(
        step,
        evaluate,
        state,
        config.iterations,
        print_every=config.print_every,
        tolerance=config.tolerance,
        window=config.tolerance_window,
        checkpoint_every=config.checkpoint_every,
        on_checkpoint=write_checkpoint,
        reporter=reporter,
    )
    best = best_iteration(loop.history)
    output_iteration = loop.iterations_run
    tensor = loop.state[0]
    if keep_best and best is not None and best < loop.iterations_run:
        output_iteration, tensor = best, loop.state[4]
    return Outcome(
        image=to_output(prepared, tensor),
        loop=loop,
        backend=backend,
        device=device,
        xla=xla,
        output_iteration=output_iteration,
        best_iteration=best,
        checkpoints=checkpoints,
        precision=precision,
        roofline=roofline_fields(counted, loop.iterations_per_sec, device, precision),
    )


def count_flops(terms: Any, weights: Any, image: Any) -> dict[str, Any]:
    """FLOPs of one iteration (loss + gradient through VGG), counted by the backend."""
    from workloads import roofline

    try:
        flops, method = roofline.gradient_flops(lambda w, x: terms(w, x)[0], image, weights)
    except Exception as exc:  # a missing figure must not cost the run
        return {"roofline_error": f"{type(exc).__name__}: {exc}"[:300]}
    return {"flops_per_iteration": flops, "flops_method": method}


def roofline_fields(
    counted: dict[str, Any], rate: float | None, device: str, precision: str = "float32"
) -> dict[str, Any]:
    """``flops_per_iteration``, the device's matmul ``peak_flops`` in ``precision``, and ``mfu``.

    The peak is that of the convolutions' compute dtype, so a bfloat16 run is measured
    against the bfloat16 peak, not flattered by the float32 one; ``peak`` says whether
    it is the datasheet's or a measured one, and when it was measured.
    """
    from workloads import roofline
    from workloads.envinfo import cpu_model

    fields: dict[str, Any] = {"flops_per_iteration": None, "peak_flops": None, "mfu": None}
    fields.update(counted)
    if fields["flops_per_iteration"] is None:
        return fields
    name = cpu_model() if device == "CPU" else device.split("(", 1)[-1].rstrip(")")
    try:
        peak = roofline.mfu_peak(name, precision)
    except Exception as exc:  # a missing figure must not cost the run
        fields["roofline_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return fields
    mfu = roofline.mfu(rate or 0.0, fields["flops_per_iteration"], peak["value"])
    fields.update(peak_flops=peak["value"], peak=peak, mfu=mfu)
    note = roofline.peak_note(mfu, peak)
    if note:
        fields["roofline_note"] = note
        print(f"note: {note}", file=sys.stderr)
    return fields


def warn_if_cpu(backend: str, device: str) -> None:
    """The issue users hit most after OOM: a 'slow run' that never used the GPU."""
    if device == "CPU":
        print(
            f"note: running on the CPU ({backend} backend sees no GPU); expect seconds per "
            "iteration at width 512",
            file=sys.stderr,
        )
