"""``workloads bench``: benchmarks that print figures and write JSON (never timed tests).

``bench cifar10`` runs the same model three ways in one process and prints
examples/sec side by side: the harness on synthetic data (model only), the
harness on real-format data (tar.gz decode + tf.data augmentation pipeline), and
a plain ``model.fit`` on in-memory NumPy arrays, the way the seed scripts ran.
The gap between the first and the last is the harness's own cost; the gap to the
second is the input pipeline's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from workloads.cli import Parser, positive_int
from workloads.records import ensure_writable, new_record, write_record

# Other workloads contribute `bench` subcommands through a register_bench(subparsers) hook.
BENCH_HOOKS = ("workloads.style.bench",)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bench",
        help="throughput benchmarks that print figures and write JSON",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    benches = parser.add_subparsers(dest="bench", metavar="BENCH", parser_class=Parser)
    benches.required = True
    cifar = benches.add_parser(
        "cifar10",
        help="harness (synthetic, real-format data) vs plain model.fit",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cifar.add_argument(
        "--model",
        default="cnn",
        choices=("cnn", "resnet50v2"),
        help="model to benchmark (default: cnn)",
    )
    cifar.add_argument(
        "--batch-size", type=positive_int, default=128, help="batch size (default: 128)"
    )
    cifar.add_argument(
        "--steps",
        type=positive_int,
        default=40,
        help="steps per epoch; 2 epochs, the first is warm-up (default: 40)",
    )
    cifar.add_argument(
        "--output",
        type=Path,
        default=Path("results/bench-cifar10.json"),
        help="JSON with all figures (default: results/bench-cifar10.json)",
    )
    cifar.set_defaults(func=run_cifar10)
    for hook in BENCH_HOOKS:
        try:
            importlib.import_module(hook).register_bench(benches)
        except ModuleNotFoundError as exc:
            if not (exc.name and hook.startswith(exc.name)):
                raise


def run_cifar10(args: argparse.Namespace) -> int:
    import keras
    import numpy as np

    from workloads.cifar10.archive_writer import random_archive
    from workloads.cifar10.data import SHA256_ENV, sha256sum
    from workloads.cifar10.models import MODELS
    from workloads.cifar10.timing import StepTimer, steady_state
    from workloads.cifar10.train import TrainConfig, train
    from workloads.envinfo import collect_env

    output = ensure_writable(args.output)
    epochs = 2
    results: dict[str, dict[str, Any]] = {}
    common = dict(
        model=args.model,
        epochs=epochs,
        steps_per_epoch=args.steps,
        batch_size=args.batch_size,
        log_every=0,
    )

    print(f"[1/3] harness, synthetic data ({args.model}, batch {args.batch_size})")
    results["harness_synthetic"] = train(TrainConfig(data="synthetic", **common), {})

    with tempfile.TemporaryDirectory() as tmp:
        images = max(5000, args.batch_size * args.steps)
        archive = random_archive(Path(tmp) / "cifar-10-python.tar.gz", train=images)
        os.environ[SHA256_ENV] = sha256sum(archive)  # our own random archive
        print(f"[2/3] harness, real-format archive ({images} random images, decoded + augmented)")
        results["harness_real_format"] = train(
            TrainConfig(data="cifar10", data_dir=tmp, **common), {}
        )

    print("[3/3] plain model.fit on in-memory NumPy arrays")
    spec = MODELS[args.model]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch_size * args.steps, spec.image_size, spec.image_size, 3))
    y = rng.integers(0, 10, len(x))
    keras.utils.set_random_seed(0)
    model = spec.build(spec.image_size)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    timer = StepTimer(global_batch=args.batch_size, log_every=0)
    model.fit(
        x.astype("float32"),
        y,
        batch_size=args.batch_size,
        epochs=epochs,
        callbacks=[timer],
        verbose=0,
    )
    stats = steady_state(timer.epochs, args.batch_size)
    results["plain_fit_numpy"] = {
        "examples_per_sec": stats.examples_per_sec,
        "step_time_s": stats.step_time_s,
        "epoch_times_s": timer.epoch_times,
    }

    baseline = results["plain_fit_numpy"]["examples_per_sec"]
    rows = [
        (name, r["examples_per_sec"], r["examples_per_sec"] / baseline)
        for name, r in results.items()
    ]
    _print_table(rows)
    record = new_record(
        "bench-cifar10",
        model=args.model,
        batch_size=args.batch_size,
        steps_per_epoch=args.steps,
        epochs=epochs,
        examples_per_sec={name: rate for name, rate, _ in rows},
        relative_to_plain_fit={name: rel for name, _, rel in rows},
        env=collect_env(),
        status="ok",
    )
    write_record(record, output)
    print(json.dumps(record["examples_per_sec"], indent=2))
    print(f"written: {output}")
    return 0


def _print_table(rows: list[tuple[str, float, float]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="CIFAR-10 benchmark: examples/sec (steady state, median step)")
    table.add_column("mode")
    table.add_column("examples/sec", justify="right")
    table.add_column("vs plain fit", justify="right")
    for name, rate, rel in rows:
        table.add_row(name, f"{rate:,.1f}", f"{rel:.2f}x")
    Console(width=100).print(table)
