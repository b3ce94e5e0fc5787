"""`workloads scale`: CIFAR-10 training on 1, 2, 4 … N GPUs, batch per GPU fixed.

Runs `workloads cifar10` once per device count on the first n of the chosen
GPUs (locally with CUDA_VISIBLE_DEVICES, or with --image in a container that
gets exactly those GPUs), samples the GPUs during each run, and writes to
--output-dir: one record per count, scaling.json and scaling.csv (epoch time,
images/s, speedup, scaling efficiency per count), the three figures
epoch_time.png, images_per_sec.png and speedup.png, and report.md.

Without a GPU (or with --cpu) the same study runs over CPU replicas
(`cifar10 --cpu-replicas n`), up to the number of CPU cores.

Speedup is images/s at n divided by images/s at the smallest count; every
epoch has the same number of images (--images-per-epoch, default the whole
data set), so epoch times are comparable too.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from tfhost.commands.common import add_env_option, add_memlock_option, environment, passthrough
from workloads.cli import positive_float, positive_int

EPILOG = """\
examples:
  workloads scale --model resnet50v2 --batch-size 64 --output-dir results/scale-r50
  workloads scale --image tfhost/workloads:ngc --gpu-ids 0,1,2,3 --precision mixed
  workloads scale --cpu --counts 1,2 --images-per-epoch 512 --batch-size 16
  workloads scale --model cnn -- --learning-rate 0.05     (extra cifar10 options after --)
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "scale",
        help="scaling study: the CIFAR-10 benchmark on 1, 2, 4 … N GPUs (or CPU replicas)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_argument_group("devices")
    where.add_argument("--gpu-ids", metavar="IDS",
                       help="GPUs to scale over, e.g. 0,1,2,3 (default: every GPU NVML sees)")
    where.add_argument("--cpu", action="store_true",
                       help="scale over CPU replicas even when GPUs are present")
    where.add_argument("--max", type=positive_int, metavar="N",
                       help="largest count (default: the number of GPUs, or of CPU cores)")
    where.add_argument("--counts", metavar="LIST",
                       help="explicit counts, e.g. 1,2,3,4 (default: 1, 2, 4 … --max)")
    bench = parser.add_argument_group("benchmark")
    bench.add_argument("--model", default="cnn",
                       help="cifar10 --model (default: cnn)")
    bench.add_argument("--batch-size", type=positive_int, default=64,
                       help="batch size PER REPLICA, fixed across counts (default: 64)")
    bench.add_argument("--epochs", type=positive_int, default=2,
                       help="epochs per run; the first is warm-up (default: 2)")
    bench.add_argument("--images-per-epoch", type=positive_int, metavar="N",
                       help="images per epoch at every count (default: the whole data set)")
    bench.add_argument("--data", default="synthetic", choices=("synthetic", "cifar10", "auto"),
                       help="cifar10 --data (default: synthetic)")
    bench.add_argument("--precision", default="fp32", choices=("fp32", "mixed"),
                       help="cifar10 --precision (default: fp32)")
    bench.add_argument("--xla", action="store_true", help="cifar10 --xla")
    run = parser.add_argument_group("execution")
    run.add_argument("--image", metavar="IMAGE",
                     help="run each count in this image through the Docker API "
                          "(default: run workloads here)")
    add_env_option(run)
    add_memlock_option(run)
    run.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                     help="with --image: time limit of each run")
    run.add_argument("--no-monitor", action="store_true",
                     help="do not sample the GPUs during the runs")
    parser.add_argument("--output-dir", type=Path, metavar="DIR",
                        help="where records, summary and figures go "
                             "(default: results/scale-MODEL-TIME)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                        help="extra `workloads cifar10` options, after --")
    parser.set_defaults(func=run_command)


def plan_from_args(args: argparse.Namespace) -> Any:
    """The study plan: which counts on which devices, validated before any run."""
    from tfhost.scaling import StudyPlan, parse_counts, power_of_two_counts
    from workloads.envinfo import nvml_gpus
    from workloads.errors import WorkloadError

    gpu_ids: list[int] = []
    if not args.cpu:
        if args.gpu_ids:
            try:
                gpu_ids = [int(part) for part in args.gpu_ids.split(",")]
            except ValueError:
                raise WorkloadError(f"--gpu-ids {args.gpu_ids!r} is not a list of GPU indices",
                                    "write it like --gpu-ids 0,1,2,3 (see nvidia-smi -L)") from None
            if len(set(gpu_ids)) != len(gpu_ids) or min(gpu_ids) < 0:
                raise WorkloadError(f"--gpu-ids {args.gpu_ids!r} must be distinct indices >= 0",
                                    "list each GPU once")
        else:
            gpu_ids = [gpu["index"] for gpu in nvml_gpus()[1]]
    elif args.gpu_ids:
        raise WorkloadError("--gpu-ids given with --cpu", "drop one of them")
    if not args.image and (args.env or args.timeout or args.memlock != -1):
        raise WorkloadError("--env, --timeout and --memlock apply to container runs",
                            "add --image IMAGE, or set the variables in this shell")
    available = len(gpu_ids) or os.cpu_count() or 1
    unit = "GPUs" if gpu_ids else "CPU replicas"
    maximum = args.max or available
    if gpu_ids and maximum > available:
        raise WorkloadError(f"--max {maximum} but only {available} GPUs to scale over",
                            f"use --max {available} or fewer")
    counts = parse_counts(args.counts) if args.counts else power_of_two_counts(maximum)
    if gpu_ids and counts[-1] > len(gpu_ids):
        raise WorkloadError(f"--counts goes up to {counts[-1]} but only {len(gpu_ids)} GPUs",
                            "lower the counts or add --gpu-ids")
    if not gpu_ids:
        print(f"scaling study: no GPU in use; scaling over CPU replicas {counts}", flush=True)
    return StudyPlan(
        counts=counts, unit=unit, gpu_ids=gpu_ids, model=args.model,
        batch_size=args.batch_size, epochs=args.epochs, images_per_epoch=args.images_per_epoch,
        data=args.data, precision=args.precision, xla=args.xla,
        extra_args=passthrough(args.args),
    )


def run_command(args: argparse.Namespace) -> int:
    from tfhost.report import render_records
    from tfhost.scaling import container_launcher, run_locally, run_study, steps_per_epoch
    from workloads.records import default_output

    plan = plan_from_args(args)
    for count in plan.counts:  # a too-small epoch fails now, not after the first runs
        steps_per_epoch(plan, count)
    out_dir = args.output_dir or default_output("scale", plan.model, suffix="")
    launch = (container_launcher(args.image, args.timeout, environment(args.env), args.memlock)
              if args.image else run_locally)
    points = run_study(plan, Path(out_dir), launch, monitor=not args.no_monitor)
    written = render_records([Path(out_dir)], Path(out_dir))
    print(f"\nscaling study over {plan.unit}: {out_dir}")
    print(f"{plan.unit:>12} {'epoch s':>9} {'images/s':>10} {'speedup':>8} {'eff.':>6}")
    for p in points:
        print(f"{p.count:>12} {p.epoch_time_s:>9.3f} {p.images_per_sec:>10,.1f} "
              f"{p.speedup:>8.2f} {p.efficiency:>6.0%}")
    print("figures: " + ", ".join(str(path) for path in written if path.suffix == ".png"))
    return 0
