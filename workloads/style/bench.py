"""``workloads bench style``: iterations/s of the style-transfer step at several widths.

Runs the real optimisation (same compiled step as ``workloads style``) on the
bundled sample images for each width and reports the steady-state rate: the
first step, which traces and compiles, is timed separately and left out. The
losses reach the host once, at the end, so the figure is the device's speed, not
Python's. Random weights by default: the speed does not depend on their values,
and no download is needed.

Until ``workloads bench`` wires this in, run it as ``python -m workloads.style.bench``.
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
        "--output",
        type=Path,
        default=Path("results/bench-style.json"),
        help="JSON record with all figures (default: results/bench-style.json)",
    )


def measure(width: int, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """One width: build everything, run ``args.iterations`` steps, return the timings."""
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
        print_every=args.iterations,  # one device→host transfer, at the end
    )
    prepared = transfer.prepare(config)
    outcome = transfer.stylize(prepared)
    loop = outcome.loop
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
        "loss_first": loop.history[0][0],
        "loss_last": loop.history[-1][0],
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
    )
    results = []
    print(f"{'width':>6} {'height':>6} {'it/s':>9} {'first step s':>13}  backend / device")
    with tempfile.TemporaryDirectory(prefix="workloads-bench-style-") as scratch:
        for width in args.widths:
            row = measure(width, args, Path(scratch))
            results.append(row)
            rate = row["iterations_per_sec"]
            print(
                f"{row['width']:>6} {row['height']:>6} {rate:>9.3f} {row['first_step_s']:>13.2f}  "
                f"{row['backend']}{' +XLA' if row['xla'] else ''} / {row['device']}",
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
