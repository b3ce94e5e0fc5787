"""``workloads cifar10``: the CIFAR-10 training benchmark.

Trains one of the benchmark models for a few epochs and reports the
steady-state throughput (examples/sec, median over all steps after the first
epoch), the epoch times, and with real data the test accuracy. Multi-GPU runs
use MirroredStrategy: --batch-size is per replica, the global batch and the
learning rate scale with the replica count.

data:
  synthetic  one random batch repeated: the model alone, no input cost
  cifar10    the official cifar-10-python.tar.gz (SHA-256-checked), from --data-dir,
             the cache ($WORKLOADS_CACHE, ~/.cache/workloads), or downloaded
  auto       cifar10 when the archive is cached or downloadable, else synthetic
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from workloads.cli import positive_float, positive_int
from workloads.errors import WorkloadError
from workloads.records import default_output, ensure_writable, new_record, write_record

MODEL_NAMES = ("cnn", "resnet50v2", "resnet152v2", "densenet121")

EPILOG = """\
examples:
  workloads cifar10 --model cnn --data synthetic --epochs 2 --steps-per-epoch 30
  workloads cifar10 --model resnet50v2 --gpus 4 --batch-size 64 --precision mixed --xla
  workloads cifar10 --data cifar10 --data-dir /datasets/cifar10 --epochs 10
  KERAS_BACKEND=jax workloads cifar10 --model cnn --data synthetic
  workloads cifar10 --model cnn --fast-cpu       # CPU host: bfloat16 where native, no XLA

downloads (the archive here, VGG19's weights for style) end at a deadline and a minimum rate:
  WORKLOADS_DOWNLOAD_DEADLINE_S     whole transfer, seconds (default 3600)
  WORKLOADS_DOWNLOAD_MIN_RATE       bytes/s averaged over each window (default 50000; 0: off)
  WORKLOADS_DOWNLOAD_RATE_WINDOW_S  that window, seconds (default 30)
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "cifar10",
        help="CIFAR-10 training benchmark (tutorial CNN, ResNet50V2, ...), multi-GPU",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--model",
        choices=MODEL_NAMES,
        default="cnn",
        help="network to train (default: cnn, the TensorFlow tutorial CNN)",
    )
    parser.add_argument(
        "--data",
        choices=("synthetic", "cifar10", "auto"),
        default="synthetic",
        help="input data (default: synthetic)",
    )
    parser.add_argument(
        "--data-dir",
        metavar="DIR",
        help="directory holding cifar-10-python.tar.gz (or the file itself)",
    )
    parser.add_argument(
        "--epochs",
        type=positive_int,
        default=2,
        help="epochs to train; the first is warm-up (default: 2)",
    )
    parser.add_argument(
        "--steps-per-epoch",
        type=positive_int,
        metavar="N",
        help="steps per epoch (default: one pass over the 50,000 images)",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=128, help="batch size PER REPLICA (default: 128)"
    )
    parser.add_argument(
        "--gpus", type=positive_int, metavar="N", help="use the first N visible GPUs (default: all)"
    )
    parser.add_argument(
        "--cpu-replicas",
        type=positive_int,
        default=1,
        metavar="N",
        help="without GPUs: split the CPU into N logical devices and mirror "
        "over them (exercises the multi-replica path; default: 1)",
    )
    parser.add_argument(
        "--precision",
        choices=("fp32", "mixed"),
        default="fp32",
        help="mixed = float16 on GPUs, bfloat16 on CPUs (default: fp32)",
    )
    parser.add_argument("--xla", action="store_true", help="compile the train step with XLA")
    parser.add_argument(
        "--steps-per-execution",
        type=positive_int,
        default=1,
        metavar="N",
        help="train steps per compiled call (fewer Python round trips; default: 1)",
    )
    parser.add_argument(
        "--fast-cpu",
        action="store_true",
        help="CPU-only hosts: the configuration measured fastest (bfloat16 where the CPU "
        "has AVX512-BF16/AMX, XLA off); overrides --precision, "
        "--xla and --steps-per-execution, and the record's fast_cpu says what it chose",
    )
    parser.add_argument(
        "--image-size",
        type=positive_int,
        metavar="PX",
        help="override the model's input size (default: 24 for cnn, else 128)",
    )
    parser.add_argument(
        "--learning-rate",
        type=positive_float,
        default=0.01,
        help="SGD learning rate for ONE replica; scaled by the replica count (default: 0.01)",
    )
    parser.add_argument(
        "--log-every",
        type=int,
        default=10,
        metavar="N",
        help="print a progress line every N steps, 0 = never (default: 10)",
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument(
        "--output",
        type=Path,
        metavar="PATH",
        help="record file (default: results/cifar10-MODEL-TIME.json); the "
        "record is also appended to records.jsonl beside it",
    )
    parser.add_argument(
        "--distributed",
        choices=("auto", "slurm", "none"),
        default="auto",
        help="slurm = one worker per SLURM task, MultiWorkerMirroredStrategy through "
        "TensorFlow's SlurmClusterResolver; auto = slurm inside a SLURM job step with several "
        "tasks, else this host only (default: auto)",
    )
    parser.add_argument(
        "--save-model", metavar="PATH.keras", help="save the trained model (Keras format)"
    )
    parser.set_defaults(func=run)


def check_args(args: argparse.Namespace) -> None:
    """Refuse contradicting or impossible options: cheap, so before TensorFlow is imported."""
    if args.log_every < 0:
        raise WorkloadError(f"--log-every must be >= 0, got {args.log_every}", "use 0 to disable")
    if args.save_model and not str(args.save_model).endswith(".keras"):
        raise WorkloadError(
            f"--save-model {args.save_model} must end in .keras", "name the file e.g. model.keras"
        )
    if args.data_dir and args.data == "synthetic":
        raise WorkloadError(
            "--data-dir given with --data synthetic", "add --data cifar10 to train on the archive"
        )
    if args.data_dir and not Path(args.data_dir).exists():
        raise WorkloadError(
            f"--data-dir {args.data_dir} not found", "check the path, or drop --data-dir"
        )


def config_from_args(args: argparse.Namespace) -> Any:
    """The training config (the options checked first, see :func:`check_args`)."""
    check_args(args)
    from workloads.cifar10.train import TrainConfig  # imports TensorFlow: after the checks

    return TrainConfig(
        model=args.model,
        data=args.data,
        data_dir=args.data_dir,
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        batch_size=args.batch_size,
        gpus=args.gpus,
        cpu_replicas=args.cpu_replicas,
        precision=args.precision,
        xla=args.xla,
        steps_per_execution=args.steps_per_execution,
        fast_cpu=args.fast_cpu,
        image_size=args.image_size,
        learning_rate=args.learning_rate,
        log_every=args.log_every,
        seed=args.seed,
        save_model=args.save_model,
        distributed=args.distributed,
    )


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from workloads.cifar10 import multiworker
    from workloads.cifar10.source import choose_data

    if multiworker.wants_slurm(args.distributed):
        # A SLURM worker re-executes itself once with workloads/netbind preloaded: here,
        # before anything imports Keras (and with it TensorFlow), so the load is paid once.
        multiworker.bind_to_node()
    check_args(args)  # all of this before TensorFlow loads: a mistake costs no import
    output = ensure_writable(args.output or default_output("cifar10", args.model))
    if args.save_model:
        ensure_writable(Path(args.save_model))
    source = choose_data(args.data, args.data_dir)  # the archive, found and checked, too
    config = config_from_args(args)
    record = new_record("cifar10", params=asdict(config))

    from workloads.cifar10.train import train
    from workloads.envinfo import collect_env
    from workloads.table import print_records

    train(config, record, source)
    if not record.pop("is_chief"):
        return 0  # multi-worker: only the chief writes the record
    record["env"] = collect_env()
    record["status"] = "ok"
    record["keras_backend_env"] = os.environ.get("KERAS_BACKEND")
    write_record(record, output)
    print_records([record], title=f"CIFAR-10 benchmark ({output})")
    return 0
