"""``workloads bench style``: iterations/s of the style-transfer step at several widths.

Runs the real optimisation (same compiled step as ``workloads style``) on the
bundled sample images for each width and reports the steady-state rate: the
first step, which traces and compiles, is timed separately and left out. The
losses reach the host once, at the end, so the figure is the device's speed, not
Python's. Random weights by default: the speed does not depend on their values,
and no download is needed.

``--reference`` also runs, at each width and right after ours (so both see the
same load), the straightforward Keras implementation of ``workloads.style.reference``
(the keras.io example's structure) for the same number of iterations, and prints
our speed-up over it. Each row carries the iteration's FLOPs as the backend
counts them and the MFU against the measured matmul peak of its precision.

``--precision float32 bfloat16`` runs both precisions at each width, from the same
start (same seed, same noise), and prints bfloat16's speed-up and how far its last
loss is from float32's: bfloat16 earns its place as the default only where it is
faster and that difference stays within 2 %.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.cli import Parser, positive_int
from workloads.errors import WorkloadError

DEFAULT_WIDTHS = (128, 256, 512)


def register_bench(sub: Any) -> None:
    """Add ``style`` to the subparsers of ``workloads bench``."""
    parser = sub.add_parser(
        "style",
        help="iterations/s of Gatys style transfer at several widths",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.set_defaults(func=run)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--widths",
        type=positive_int,
        nargs="+",
        default=list(DEFAULT_WIDTHS),
        help="output widths to time (default: 128 256 512)",
    )
    parser.add_argument(
        "--iterations",
        type=positive_int,
        default=20,
        help="steps per width, the first (compiling) one not counted in the rate (default: 20)",
    )
    parser.add_argument(
        "--weights", default="random", help="random (default), imagenet, or a weights file"
    )
    parser.add_argument("--xla", action="store_true", help="compile with XLA (TensorFlow backend)")
    parser.add_argument("--pooling", choices=("max", "avg"), default="max")
    parser.add_argument(
        "--precision",
        choices=("float32", "bfloat16"),
        nargs="+",
        default=["float32"],
        help="VGG feature precision(s) to time; with both, print bfloat16's speed-up and "
        "last-loss difference against float32 (default: float32)",
    )
    parser.add_argument(
        "--reference",
        action="store_true",
        help="also time the straightforward keras.io-style implementation at each width "
        "and print the speed-up (TensorFlow backend)",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("results/bench-style.json"),
        help="JSON record with all figures (default: results/bench-style.json)",
    )


def measure(
    width: int, args: argparse.Namespace, scratch: Path, precision: str = "float32"
) -> dict[str, Any]:
    """One width and precision: build everything, run ``args.iterations`` steps, time them."""
    from workloads.style import transfer
    from workloads.style.config import StyleConfig
    from workloads.style.images import SAMPLE_CONTENT, SAMPLE_STYLE, sample_path

    config = StyleConfig(
        content=sample_path(SAMPLE_CONTENT),
        styles=[sample_path(SAMPLE_STYLE)],
        output=scratch / f"bench-{width}.png",
        width=width,
        iterations=args.iterations,
        weights=args.weights,
        xla=args.xla,
        pooling=args.pooling,
        precision=precision,
        print_every=args.iterations,  # one device→host transfer, at the end
    )
    prepared = transfer.prepare(config)
    outcome = transfer.stylize(prepared)
    loop = outcome.loop
    with_reference = args.reference and precision == args.precision[0]
    if with_reference:
        reference = measure_reference(prepared, args.iterations)
    return {
        "width": prepared.width,
        "height": prepared.height,
        "iterations": loop.iterations_run,
        "iterations_per_sec": loop.iterations_per_sec,
        "first_step_s": loop.first_step_s,
        "time_to_last_iteration_s": loop.total_s,
        "backend": outcome.backend,
        "device": outcome.device,
        "xla": outcome.xla,
        "precision": precision,
        "loss_first": loop.history[0][0],
        "loss_last": loop.history[-1][0],
        **outcome.roofline,
        **({"reference": reference} if with_reference else {}),
    }


def measure_reference(prepared: Any, iterations: int) -> dict[str, Any]:
    """The keras.io-structured implementation on the same images, weights and iterations."""
    import keras

    from workloads import roofline
    from workloads.style import images, reference, vgg

    if keras.backend.backend() != "tensorflow":
        raise WorkloadError(
            f"--reference needs the tensorflow backend (KERAS_BACKEND={keras.backend.backend()})",
            "unset KERAS_BACKEND or drop --reference",
        )
    config = prepared.config
    network = vgg.load_vgg19(prepared.weights, config.seed)
    content = images.preprocess(prepared.content)
    style = images.preprocess(
        images.resize(prepared.styles[0], prepared.height, prepared.width, "style")
    )
    result = reference.run(network, content, style, iterations)
    step, image, _ = reference.build(network, content, style)
    # Its loss-and-gradient function, traced afresh so the ops are counted inline.
    result["flops_per_iteration"] = roofline.tensorflow_function_flops(step.python_function, image)
    return result


# bfloat16 replaces float32 only if its last loss is this close to float32's.
LOSS_TOLERANCE = 0.02


def compare_precisions(results: list[dict[str, Any]], width: int) -> dict[str, Any] | None:
    """bfloat16 against float32 at ``width``, once both rows are in ``results``."""
    rows = {r["precision"]: r for r in results if r["width"] == width}
    fp32, bf16 = rows.get("float32"), rows.get("bfloat16")
    if not (fp32 and bf16 and fp32["iterations_per_sec"] and bf16["iterations_per_sec"]):
        return None
    difference = (bf16["loss_last"] - fp32["loss_last"]) / abs(fp32["loss_last"])
    speedup = bf16["iterations_per_sec"] / fp32["iterations_per_sec"]
    adopt = speedup > 1 and abs(difference) <= LOSS_TOLERANCE
    return {
        "speedup": speedup,
        "loss_difference": difference,
        "loss_tolerance": LOSS_TOLERANCE,
        "verdict": "bfloat16 qualifies" if adopt else "keep float32",
    }


def run(args: argparse.Namespace) -> int:
    from workloads.records import ensure_writable, new_record, utc_now, write_record

    ensure_writable(args.output)
    record = new_record(
        "bench-style",
        widths=args.widths,
        iterations=args.iterations,
        weights=args.weights,
        pooling=args.pooling,
        precisions=args.precision,
    )
    results = []
    print(
        f"{'width':>6} {'height':>6} {'precision':>9} {'it/s':>9} {'GFLOP/it':>9} {'MFU':>5} "
        f"{'first step s':>13}  backend / device"
    )
    with tempfile.TemporaryDirectory(prefix="workloads-bench-style-") as scratch:
        for width, precision in ((w, p) for w in args.widths for p in args.precision):
            row = measure(width, args, Path(scratch), precision)
            results.append(row)
            rate = row["iterations_per_sec"]
            gflop = f"{row['flops_per_iteration'] / 1e9:.1f}" if row["flops_per_iteration"] else "-"
            mfu = f"{row['mfu']:.0%}" if row["mfu"] is not None else "-"
            if "reference" in row and row["reference"]["iterations_per_sec"] and rate:
                row["speedup_vs_reference"] = rate / row["reference"]["iterations_per_sec"]
            print(
                f"{row['width']:>6} {row['height']:>6} {precision:>9} {rate:>9.3f} {gflop:>9} "
                f"{mfu:>5} "
                f"{row['first_step_s']:>13.2f}  "
                f"{row['backend']}{' +XLA' if row['xla'] else ''} / {row['device']}",
                flush=True,
            )
            if "speedup_vs_reference" in row:
                ref = row["reference"]
                print(
                    f"{'':>6} {'':>6} {'float32':>9} {ref['iterations_per_sec']:>9.3f} "
                    f"{ref['flops_per_iteration'] / 1e9:>9.1f} {'':>5} {'':>13}  keras.io-style "
                    f"reference: ours is {row['speedup_vs_reference']:.2f}x faster",
                    flush=True,
                )
            compared = compare_precisions(results, width)
            if compared:
                row["vs_float32"] = compared
                print(
                    f"{'':>6} {'':>6} {'':>9} bfloat16 vs float32: "
                    f"{compared['speedup']:.2f}x the iterations/s, last loss "
                    f"{compared['loss_difference']:+.2%} ({compared['verdict']})",
                    flush=True,
                )
    from workloads.envinfo import collect_env

    record.update(status="ok", finished_at=utc_now(), results=results, env=collect_env())
    write_record(record, args.output)
    print(f"wrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m workloads.style.bench``: the same as ``workloads bench style``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    parser = Parser(prog="workloads bench style", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except WorkloadError as exc:
        print(f"workloads bench style: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
