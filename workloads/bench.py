"""``workloads bench``: benchmarks that print figures and write JSON (never timed tests).

``bench cifar10`` runs the same model several ways in one process and prints
examples/sec and MFU side by side, with every leg's settings: a plain
``model.fit`` on in-memory float32 NumPy arrays (Keras' plain way of training),
the harness on synthetic data (model only) and on real-format data (tar.gz
decode + tf.data augmentation pipeline), all three with the same precision and
the same ``jit_compile``; on a CPU-only host also the harness's fast CPU
configuration (``workloads cifar10 --fast-cpu``) on both kinds of data. Plain
fit vs synthetic is the harness's own cost, synthetic vs real-format the input
pipeline's, fast CPU vs plain fit what the tuned path gains.
"""

from __future__ import annotations

import argparse
import importlib
import os
import tempfile
from pathlib import Path
from typing import Any

from workloads.cli import Parser, positive_int
from workloads.records import ensure_writable, new_record, write_record

# Other workloads contribute `bench` subcommands through a register_bench(subparsers) hook.
BENCH_HOOKS = ("workloads.style.bench", "workloads.fleet.bench")


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
        "--xla",
        action="store_true",
        help="jit_compile every leg, the plain-fit one included (default: off for all)",
    )
    cifar.add_argument(
        "--rounds",
        type=positive_int,
        default=1,
        help="run all legs this many times, interleaved, and report each leg's median: "
        "on a shared machine the ratios then compare legs under the same load (default: 1)",
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
    output = ensure_writable(args.output)  # before TensorFlow loads: a mistake costs no import

    import dataclasses
    import statistics

    from workloads.cifar10.archive_writer import random_archive
    from workloads.cifar10.data import SHA256_ENV, sha256sum
    from workloads.cifar10.train import TrainConfig, fast_cpu_config, train
    from workloads.envinfo import collect_env

    base = TrainConfig(
        model=args.model,
        epochs=2,
        steps_per_epoch=args.steps,
        batch_size=args.batch_size,
        xla=args.xla,
        log_every=0,
    )
    _, fast_facts = fast_cpu_config(base)
    fast = dataclasses.replace(base, fast_cpu=True)
    rates: dict[str, list[float]] = {}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # At most CIFAR-10's 50000 training images: a batch of more than 10000 is not
        # CIFAR-10 and the reader refuses it; the training set repeats, so steps still run.
        images = min(max(5000, args.batch_size * args.steps), 50_000)
        archive = random_archive(Path(tmp) / "cifar-10-python.tar.gz", train=images)
        # Our own random archive in the official format: trust its checksum for this run only.
        previous_sha256 = os.environ.get(SHA256_ENV)
        os.environ[SHA256_ENV] = sha256sum(archive)
        real: dict[str, Any] = {"data": "cifar10", "data_dir": tmp}
        legs: list[tuple[str, Any]] = [
            ("plain_fit_numpy", None),
            ("harness_synthetic", base),
            ("harness_real_format", dataclasses.replace(base, **real)),
        ]
        if fast_facts["applies"]:
            legs += [
                ("harness_fast_cpu_synthetic", fast),
                ("harness_fast_cpu_real_format", dataclasses.replace(fast, **real)),
            ]
        try:
            for round_ in range(1, args.rounds + 1):
                for index, (name, config) in enumerate(legs, start=1):
                    result = plain_fit(base) if config is None else train(config, {})
                    if name not in results:
                        results[name] = result
                        print(f"[{index}/{len(legs)}] {name}: {settings_text(result)}")
                    rates.setdefault(name, []).append(result["examples_per_sec"])
                    print(
                        f"    round {round_}: {result['examples_per_sec']:,.1f} examples/sec",
                        flush=True,
                    )
        finally:
            if previous_sha256 is None:
                os.environ.pop(SHA256_ENV, None)
            else:
                os.environ[SHA256_ENV] = previous_sha256

    summary = {}
    baseline = statistics.median(rates["plain_fit_numpy"])
    for name, result in results.items():
        rate = statistics.median(rates[name])
        summary[name] = {
            "settings": settings(result),
            "examples_per_sec": rate,
            "examples_per_sec_rounds": rates[name],
            "relative_to_plain_fit": rate / baseline,
            "flops_per_example": result.get("flops_per_example"),
            "peak_flops": result.get("peak_flops"),
            "mfu": _mfu(rate, result),
        }
    ratios = {
        "real_format_vs_synthetic": _ratio(summary, "harness_real_format", "harness_synthetic"),
        "fast_cpu_vs_plain_fit": _ratio(summary, "harness_fast_cpu_synthetic", "plain_fit_numpy"),
        "fast_cpu_real_format_vs_synthetic": _ratio(
            summary, "harness_fast_cpu_real_format", "harness_fast_cpu_synthetic"
        ),
    }
    _print_table(summary)
    for name, value in ratios.items():
        if value is not None:
            print(f"{name}: {value:.2f}x")
    record = new_record(
        "bench-cifar10",
        model=args.model,
        batch_size=args.batch_size,
        steps_per_epoch=args.steps,
        epochs=base.epochs,
        rounds=args.rounds,
        legs=summary,
        ratios=ratios,
        fast_cpu=fast_facts,
        examples_per_sec={name: leg["examples_per_sec"] for name, leg in summary.items()},
        relative_to_plain_fit={name: leg["relative_to_plain_fit"] for name, leg in summary.items()},
        load_average=os.getloadavg() if hasattr(os, "getloadavg") else None,
        env=collect_env(),
        status="ok",
    )
    write_record(record, output)
    print(f"written: {output}")
    return 0


def plain_fit(config: Any) -> dict[str, Any]:
    """The seeds' way: ``model.fit`` on in-memory float32 NumPy arrays, Keras defaults.

    Only ``jit_compile`` is pinned, to the harness legs' setting: Keras' default
    ``"auto"`` turns XLA on for a GPU, which would compare XLA with no XLA. The
    arrays are float32 (NumPy's default float64 would double the host memory and
    add a conversion to every batch). One epoch is one pass over the arrays, as in
    the seeds, so they hold exactly ``steps_per_epoch`` batches.
    """
    import keras
    import numpy as np

    from workloads.cifar10.models import MODELS
    from workloads.cifar10.timing import StepTimer, steady_state
    from workloads.cifar10.train import backend_name, xla_mode
    from workloads.envinfo import cpu_model

    spec = MODELS[config.model]
    rng = np.random.default_rng(0)
    size = config.image_size or spec.image_size
    examples = config.batch_size * config.steps_per_epoch
    x = rng.standard_normal((examples, size, size, 3), dtype=np.float32)
    y = rng.integers(0, 10, len(x)).astype(np.int32)
    keras.utils.set_random_seed(config.seed)
    model = spec.build(size)
    jit = xla_mode(config, backend_name(), 1) == "jit_compile"
    model.compile(
        optimizer=keras.optimizers.SGD(config.learning_rate, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit,
    )
    timer = StepTimer(global_batch=config.batch_size, log_every=0, announce_epochs=False)
    model.fit(
        x,
        y,
        batch_size=config.batch_size,
        epochs=config.epochs,
        callbacks=[timer],
        verbose=0,
    )
    stats = steady_state(timer.epochs, config.batch_size)
    result: dict[str, Any] = {
        "model": config.model,
        "data": "numpy float32 in memory",
        "backend": backend_name(),
        "dtype_policy": "float32",
        "xla_mode": "jit_compile" if jit else "off",
        "steps_per_execution": 1,
        "examples_per_sec": stats.examples_per_sec,
        "step_time_s": stats.step_time_s,
        "epoch_times_s": timer.epoch_times,
    }
    from workloads import roofline

    try:
        flops, method = roofline.flops_per_example(model, model.loss)
        peak = roofline.mfu_peak((_gpu_names() or [cpu_model()])[0], "float32")["value"]
    except Exception as exc:  # the throughput figure stands without it
        result["roofline_error"] = f"{type(exc).__name__}: {exc}"[:300]
        return result
    result.update(flops_per_example=flops, flops_method=method, peak_flops=peak)
    return result


def _gpu_names() -> list[str]:
    """Visible GPUs by the name ``train`` records for them (TensorFlow's device details)."""
    import keras

    if keras.backend.backend() != "tensorflow":
        return []
    import tensorflow as tf

    return [
        str(tf.config.experimental.get_device_details(d).get("device_name", d.name))
        for d in tf.config.list_physical_devices("GPU")
    ]


SETTING_KEYS = ("data", "backend", "dtype_policy", "xla_mode", "steps_per_execution", "threads")


def settings(result: dict[str, Any]) -> dict[str, Any]:
    """The settings that make a leg what it is, as the bench prints and records them."""
    return {key: result.get(key) for key in SETTING_KEYS if key in result}


def settings_text(result: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in settings(result).items())


def _mfu(rate: float, result: dict[str, Any]) -> float | None:
    from workloads.roofline import mfu

    return mfu(rate, result.get("flops_per_example") or 0.0, result.get("peak_flops") or 0.0)


def _ratio(summary: dict[str, dict[str, Any]], top: str, bottom: str) -> float | None:
    if top not in summary or bottom not in summary:
        return None
    return float(summary[top]["examples_per_sec"] / summary[bottom]["examples_per_sec"])


def _print_table(summary: dict[str, dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="CIFAR-10 benchmark: examples/sec (steady state, median step)")
    for column in ("leg", "settings", "examples/sec", "vs plain fit", "MFU"):
        table.add_column(column, justify="left" if column in ("leg", "settings") else "right")
    for name, leg in summary.items():
        mfu = leg["mfu"]
        table.add_row(
            name,
            ", ".join(f"{k}={v}" for k, v in leg["settings"].items() if k != "backend"),
            f"{leg['examples_per_sec']:,.1f}",
            f"{leg['relative_to_plain_fit']:.2f}x",
            f"{mfu:.0%}" if mfu is not None else "-",
        )
    Console(width=160).print(table)
