"""``workloads style``: Gatys et al. neural style transfer with VGG19.

Optimises an image with Adam so that it keeps the content of --content and the
style of --styles (VGG19 features: content relu4_2/relu5_2, style Gram matrices of
relu1_1 … relu5_1, plus total variation):

  total = content_weight·content + style_weight·style + tv_weight·tv

The algorithm is anishathalye/neural-style's, and the defaults are the base point
of the published parameter study elcorto/style_transfer_parameter_sweep: width 512,
1000 iterations, learning rate 10, content weight 1, style weight 10, tv weight 100,
content-weight-blend 0.2, layer-weight exponent 1, style scale 1, max pooling,
white-noise start, colours preserved. neural-style's own CLI defaults differ
(content weight 5, style weight 500, blend 1, colours not preserved); to run
those, pass: --content-weight 5 --style-weight 500 --content-weight-blend 1
--no-preserve-colors.

The output is the image after the last iteration (--keep last, which is what that
study's runs saved: neural-style keeps the lowest-loss image among the
iterations it checks, and without --checkpoint-iterations it checks only the
last). --keep best saves the lowest-loss image instead. Both are in the record.

Writes OUTPUT.png and OUTPUT.json (the record: every parameter, the loss history,
iterations/s, the convergence iteration, device and versions).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from workloads.cli import non_negative_float, positive_float, positive_int, unit_float
from workloads.errors import OutOfMemory, WorkloadError, is_out_of_memory
from workloads.records import default_output, new_record, utc_now, write_record

EPILOG = """\
examples:
  workloads style --weights random --width 64 --iterations 20 --output out.png
  workloads style --content me.jpg --styles candy.jpg --output out.png     (the study's base point)
  workloads style --content me.jpg --styles a.jpg b.jpg --style-blend-weights 0.7 0.3 \\
      --pooling avg --tolerance 1e-3 --checkpoint-every 100 --output out.png

weights:
  --weights imagenet downloads vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5 once into
  $WORKLOADS_CACHE/vgg19/ (default ~/.cache/workloads/vgg19/); offline hosts copy it there.

downloads (these weights, CIFAR-10's archive) end at a deadline and a minimum rate:
  WORKLOADS_DOWNLOAD_DEADLINE_S     whole transfer, seconds (default 3600)
  WORKLOADS_DOWNLOAD_MIN_RATE       bytes/s averaged over each window (default 50000; 0: off)
  WORKLOADS_DOWNLOAD_RATE_WINDOW_S  that window, seconds (default 30)
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "style",
        help="Gatys neural style transfer with VGG19 (anishathalye/neural-style's algorithm)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``workloads style``; shared with ``workloads bench style``."""
    io = parser.add_argument_group("images")
    io.add_argument("--content", type=Path, help="content image (default: bundled landscape)")
    io.add_argument(
        "--styles", type=Path, nargs="+", help="style image(s) (default: bundled swirls)"
    )
    io.add_argument(
        "--output",
        type=Path,
        help="output PNG; the record goes beside it as .json "
        "(default: $WORKLOADS_RESULTS/style-gatys-<UTC time>.png, else ./results/)",
    )
    io.add_argument(
        "--width",
        type=positive_int,
        default=512,
        help="output width in px; height keeps the content's aspect ratio (default: 512)",
    )
    io.add_argument(
        "--initial",
        default="none",
        help="start image: none (white noise), content, or a path, e.g. an earlier "
        "output to continue from (default: none)",
    )
    io.add_argument(
        "--initial-noiseblend",
        type=unit_float,
        help="share of white noise mixed into the start image; with --initial none the "
        "noise is mixed into the content image (default: 1 with --initial none, else 0)",
    )
    io.add_argument(
        "--preserve-colors",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="keep the content's colours (luminance from the result) (default: on, as the study)",
    )

    loss = parser.add_argument_group("loss")
    loss.add_argument("--content-weight", type=non_negative_float, default=1.0, help="(default: 1)")
    loss.add_argument(
        "--content-weight-blend",
        type=unit_float,
        default=0.2,
        help="share of relu4_2 in the content loss, the rest relu5_2 (default: 0.2)",
    )
    loss.add_argument("--style-weight", type=non_negative_float, default=10.0, help="(default: 10)")
    loss.add_argument("--tv-weight", type=non_negative_float, default=100.0, help="(default: 100)")
    loss.add_argument(
        "--style-layer-weight-exp",
        type=non_negative_float,
        default=1.0,
        help="weight of style layer n+1 = exp × weight of layer n, normalised (default: 1)",
    )
    loss.add_argument(
        "--style-scales",
        type=positive_float,
        nargs="+",
        default=[1.0],
        help="style image width relative to the output's, one for all or one per style "
        "(default: 1)",
    )
    loss.add_argument(
        "--style-blend-weights",
        type=non_negative_float,
        nargs="+",
        help="one weight per style image, normalised (default: equal)",
    )
    loss.add_argument(
        "--pooling",
        choices=("max", "avg"),
        default="max",
        help="VGG19 pooling; avg replaces every max-pooling layer (default: max)",
    )

    opt = parser.add_argument_group("optimisation")
    opt.add_argument("--iterations", type=positive_int, default=1000, help="(default: 1000)")
    opt.add_argument(
        "--learning-rate", type=positive_float, default=10.0, help="Adam's step (default: 10)"
    )
    opt.add_argument("--seed", type=int, default=0, help="noise and random weights (default: 0)")
    opt.add_argument(
        "--weights",
        default="imagenet",
        help="imagenet (Keras' VGG19, downloaded once), random (seeded; speed tests), "
        "or a path to a Keras VGG19 no-top weights file (default: imagenet)",
    )
    opt.add_argument(
        "--xla", action="store_true", help="compile the step with XLA (TensorFlow backend)"
    )
    opt.add_argument(
        "--precision",
        choices=("auto", "float32", "bfloat16"),
        default="auto",
        help="VGG's features in bfloat16 (image, Gram matrices, losses and Adam stay float32) "
        "or float32; auto: bfloat16 on CPUs with AVX512-BF16/AMX, where it was measured "
        "faster with the same loss, float32 elsewhere. The record's precision says which ran; "
        "`workloads bench style --precision float32 bfloat16` measures both (default: auto)",
    )
    opt.add_argument(
        "--skip-memory-check",
        action="store_true",
        help="run even when the (approximate) memory estimate says the width does not fit",
    )

    mon = parser.add_argument_group("monitoring")
    mon.add_argument(
        "--print-every",
        type=positive_int,
        default=10,
        help="print the loss terms every N iterations; also how often losses reach the "
        "host (default: 10)",
    )
    mon.add_argument(
        "--tolerance",
        type=non_negative_float,
        help="stop early once |L[i] - L[i-window]| / L[i-window] < TOLERANCE (default: off)",
    )
    mon.add_argument(
        "--tolerance-window",
        type=positive_int,
        default=50,
        help="iterations the relative change is measured over (default: 50)",
    )
    mon.add_argument(
        "--checkpoint-every",
        type=positive_int,
        help="write OUTPUT-NNNN.png every N iterations (default: off)",
    )
    mon.add_argument(
        "--keep",
        choices=("last", "best"),
        default="last",
        help="output the last iteration's image or the lowest-loss one (default: last)",
    )


def config_from_args(args: argparse.Namespace) -> Any:
    """A :class:`StyleConfig` from parsed options, sample images filling the gaps."""
    from workloads.style.config import StyleConfig
    from workloads.style.images import SAMPLE_CONTENT, SAMPLE_STYLE, sample_path

    output = args.output or default_output("style", "gatys", ".png")
    return StyleConfig(
        content=args.content or sample_path(SAMPLE_CONTENT),
        styles=list(args.styles or [sample_path(SAMPLE_STYLE)]),
        output=Path(output).expanduser(),
        width=args.width,
        iterations=args.iterations,
        initial=args.initial,
        initial_noiseblend=args.initial_noiseblend,
        pooling=args.pooling,
        content_weight=args.content_weight,
        learning_rate=args.learning_rate,
        style_scales=list(args.style_scales),
        content_weight_blend=args.content_weight_blend,
        style_weight=args.style_weight,
        tv_weight=args.tv_weight,
        style_layer_weight_exp=args.style_layer_weight_exp,
        style_blend_weights=args.style_blend_weights,
        preserve_colors=args.preserve_colors,
        seed=args.seed,
        weights=args.weights,
        xla=args.xla,
        precision=args.precision,
        keep=args.keep,
        print_every=args.print_every,
        tolerance=args.tolerance,
        tolerance_window=args.tolerance_window,
        checkpoint_every=args.checkpoint_every,
    )


def parameters(config: Any) -> dict[str, Any]:
    """The record's parameter fields, named as in elcorto/style_transfer_parameter_sweep."""
    return {
        "content": str(config.content),
        "styles": [str(p) for p in config.styles],
        "width": config.width,
        "iterations": config.iterations,
        "initial": config.initial,
        "initial_noiseblend": config.noiseblend(),
        "pooling": config.pooling,
        "content_weight": config.content_weight,
        "learning_rate": config.learning_rate,
        "style_scales": config.style_scales,
        "content_weight_blend": config.content_weight_blend,
        "style_weight": config.style_weight,
        "tv_weight": config.tv_weight,
        "style_layer_weight_exp": config.style_layer_weight_exp,
        "style_blend_weights": config.style_blend_weights,
        "preserve_colors": config.preserve_colors,
        "seed": config.seed,
        "weights": config.weights,
        "precision": config.precision,
        "keep": config.keep,
        "print_every": config.print_every,
        "tolerance": config.tolerance,
        "tolerance_window": config.tolerance_window,
        "checkpoint_every": config.checkpoint_every,
    }


def _finite(value: float) -> float | None:
    """JSON has no NaN: a diverged loss is recorded as null."""
    return value if math.isfinite(value) else None


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4g}"


def loss_fields(outcome: Any) -> dict[str, Any]:
    """Loss history per term, and the last and best iterations' terms."""
    from workloads.style.optimize import TERMS

    history = outcome.loop.history

    def terms_at(i: int) -> dict[str, Any]:
        return {"iteration": i, **{t: _finite(v) for t, v in zip(TERMS, history[i], strict=True)}}

    best = outcome.best_iteration
    return {
        "loss_terms_weighted": True,
        "loss_history": {t: [_finite(row[k]) for row in history] for k, t in enumerate(TERMS)},
        "last_loss": terms_at(len(history) - 1),
        "best_loss": terms_at(best) if best is not None else None,
    }


def run(args: argparse.Namespace) -> int:
    from workloads.style import transfer
    from workloads.style.images import save_png
    from workloads.style.progress import RichReporter

    config = config_from_args(args)
    record = new_record("style", **parameters(config))
    prepared = transfer.prepare(config, check_memory=not args.skip_memory_check)
    try:
        outcome = transfer.stylize(prepared, reporter=RichReporter(), on_start=transfer.warn_if_cpu)
    except WorkloadError:
        raise
    except Exception as exc:
        if is_out_of_memory(exc):
            raise OutOfMemory(
                f"out of memory at width {prepared.width} (estimate was "
                f"{prepared.memory_estimate_bytes / 2**30:.1f} GiB)",
                "use a smaller --width",
            ) from exc
        raise

    from workloads.envinfo import collect_env

    loop = outcome.loop
    record.update(
        status="ok",
        finished_at=utc_now(),
        output=str(config.output),
        height=prepared.height,
        backend=outcome.backend,
        device=outcome.device,
        xla=outcome.xla,
        compute_precision=outcome.precision,  # what --precision (auto) resolved to
        weights_source=prepared.weights.describe(),
        memory_estimate_bytes=prepared.memory_estimate_bytes,
        iterations_run=loop.iterations_run,
        converged_at=loop.converged_at,
        output_is=config.keep,
        output_iteration=outcome.output_iteration,
        best_iteration=outcome.best_iteration,
        iterations_per_sec=loop.iterations_per_sec,
        **outcome.roofline,
        time_to_last_iteration_s=loop.total_s,
        first_step_s=loop.first_step_s,
        checkpoints=[str(p) for p in outcome.checkpoints],
        **loss_fields(outcome),
        env=collect_env(),
    )
    save_png(config.output, outcome.image)
    write_record(record, config.record_path)
    rate = loop.iterations_per_sec
    chosen = record["loss_history"]["total"][outcome.output_iteration]
    converged = loop.converged_at
    print(
        f"wrote {config.output} ({prepared.width}x{prepared.height}; the {config.keep} image: "
        f"iteration {outcome.output_iteration}, total loss {_fmt(chosen)}) and "
        f"{config.record_path}; {_fmt(rate)} it/s on {outcome.device} ({outcome.backend})"
        + (f"; converged at iteration {converged}" if converged is not None else "")
    )
    sys.stdout.flush()
    return 0
