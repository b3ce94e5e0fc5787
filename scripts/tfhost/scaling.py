"""The scaling study: the same benchmark on 1, 2, 4 … N GPUs, batch per GPU fixed.

Seeds 001 and 002 asked how much faster training gets with more GPUs. Each
count runs ``workloads cifar10`` on a subset of the GPUs (the first n of the
chosen ones), locally with ``CUDA_VISIBLE_DEVICES`` or in a container with a
GPU device request. The per-replica batch stays fixed, so the global batch
grows with n; the epoch is a fixed number of images (the whole data set by
default), so epoch times are comparable. Without a GPU the same study runs
over CPU replicas (``--cpu-replicas n``), which exercises every step here.

Figures per count: epoch time (median of the epochs after the first, which
includes tracing and compilation), images/s (the record's steady-state
median), speedup = images/s ÷ images/s of the smallest count, and scaling
efficiency = speedup ÷ (n ÷ smallest n).
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads import safefs
from workloads.bounded import BadInput, read_json
from workloads.errors import WorkloadError, clip
from workloads.records import atomic_write_bytes, read_record, utc_now

SUMMARY_JSON = "scaling.json"
SUMMARY_CSV = "scaling.csv"


@dataclass(frozen=True)
class ScalePoint:
    """The figures of one device count."""

    count: int
    epoch_time_s: float
    images_per_sec: float
    speedup: float
    efficiency: float
    global_batch_size: int | None = None
    record: str | None = None


@dataclass(frozen=True)
class StudyPlan:
    """What to run: the counts, on which devices, with which benchmark options."""

    counts: list[int]
    unit: str  # "GPUs" or "CPU replicas"
    gpu_ids: list[int] = field(default_factory=list)  # empty in CPU mode
    model: str = "cnn"
    batch_size: int = 64
    epochs: int = 2
    images_per_epoch: int | None = None
    data: str = "synthetic"
    precision: str = "fp32"
    xla: bool = False
    extra_args: list[str] = field(default_factory=list)

    @property
    def on_gpus(self) -> bool:
        return bool(self.gpu_ids)


def power_of_two_counts(maximum: int) -> list[int]:
    """1, 2, 4 … up to ``maximum``, with ``maximum`` itself last if not a power of two."""
    if maximum < 1:
        raise WorkloadError(f"the largest count must be >= 1, got {maximum}", "use --max 1 or more")
    counts = []
    n = 1
    while n < maximum:
        counts.append(n)
        n *= 2
    counts.append(maximum)
    return counts


def parse_counts(text: str) -> list[int]:
    """``1,2,4`` → [1, 2, 4], rejecting zero, negatives, repeats and words."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise WorkloadError(
            f"--counts {text!r} is not a comma-separated list of whole numbers",
            "write it like --counts 1,2,4",
        ) from None
    if any(c < 1 for c in counts) or len(set(counts)) != len(counts):
        raise WorkloadError(f"--counts {text!r} must be distinct numbers >= 1",
                            "e.g. --counts 1,2,4")
    return sorted(counts)


def steps_per_epoch(plan: StudyPlan, count: int) -> int | None:
    """Steps that make one epoch ``images_per_epoch`` images at ``count`` replicas."""
    if plan.images_per_epoch is None:
        return None
    steps = plan.images_per_epoch // (plan.batch_size * count)
    if steps < 1:
        raise WorkloadError(
            f"--images-per-epoch {plan.images_per_epoch} is less than one global batch "
            f"({plan.batch_size} × {count} replicas)",
            f"use --images-per-epoch {plan.batch_size * count} or more",
        )
    return steps


def record_name(plan: StudyPlan, count: int) -> str:
    kind = "gpus" if plan.on_gpus else "cpu-replicas"
    return f"cifar10-{plan.model}-{kind}-{count}.json"


def benchmark_args(plan: StudyPlan, count: int, output: str) -> list[str]:
    """``workloads cifar10`` arguments for one count (without the program name)."""
    args = [
        "cifar10", "--model", plan.model, "--data", plan.data,
        "--batch-size", str(plan.batch_size), "--epochs", str(plan.epochs),
        "--precision", plan.precision, "--output", output,
    ]
    steps = steps_per_epoch(plan, count)
    if steps is not None:
        args += ["--steps-per-epoch", str(steps)]
    if plan.xla:
        args.append("--xla")
    if not plan.on_gpus:
        args += ["--cpu-replicas", str(count)]
    return args + list(plan.extra_args)


# A function that runs one count and returns its exit code: local or in a container.
Launcher = Callable[[StudyPlan, int, Path], int]


def run_locally(plan: StudyPlan, count: int, record: Path) -> int:
    """``python -m workloads cifar10`` with the first ``count`` GPUs visible."""
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in plan.gpu_ids[:count])
    command = [sys.executable, "-m", "workloads", *benchmark_args(plan, count, str(record))]
    return subprocess.run(command, env=env, check=False).returncode


def container_launcher(image: str, timeout_s: float | None = None,
                       environment: dict[str, str] | None = None,
                       memlock_bytes: int = -1) -> Launcher:
    """A launcher that runs each count in ``image`` with a GPU device request."""
    from tfhost.runner import RESULTS_MOUNT, RunSpec, run

    def launch(plan: StudyPlan, count: int, record: Path) -> int:
        gpus = tuple(str(i) for i in plan.gpu_ids[:count]) or None
        spec = RunSpec(
            image=image,
            command=benchmark_args(plan, count, f"{RESULTS_MOUNT}/{record.name}"),
            gpus=gpus,
            results_dir=record.parent,
            environment=environment or {},
            timeout_s=timeout_s,
            memlock_bytes=memlock_bytes,
        )
        return run(spec)

    return launch


def run_study(plan: StudyPlan, out_dir: Path, launch: Launcher = run_locally,
              monitor: bool = True) -> list[ScalePoint]:
    """Run every count, then write the summary; a failed count stops the study.

    What finished before a failure is summarised and kept, so a study that dies
    at 8 GPUs still leaves its 1-, 2- and 4-GPU figures.
    """
    from tfhost.monitor import csv_beside, monitoring

    safefs.ensure_directory(out_dir)
    done: list[tuple[int, Path]] = []
    for count in plan.counts:
        record = out_dir / record_name(plan, count)
        print(f"scaling study: {count} {plan.unit} ...", flush=True)
        if plan.on_gpus and monitor:
            with monitoring(csv_beside(record), indices=plan.gpu_ids[:count]):
                code = launch(plan, count, record)
        else:
            code = launch(plan, count, record)
        if code != 0 or not record.is_file():
            if done:
                write_summary(summarise(_load(done)), plan, out_dir)
            raise WorkloadError(
                f"the run with {count} {plan.unit} failed (exit {code}); figures so far: "
                f"{out_dir}",
                "see its output above (out of memory: lower --batch-size)",
            )
        done.append((count, record))
    points = summarise(_load(done))
    write_summary(points, plan, out_dir)
    return points


def _load(done: Iterable[tuple[int, Path]]) -> list[tuple[int, dict[str, Any], str]]:
    return [(count, read_record(path), path.name) for count, path in done]


def epoch_time(record: dict[str, Any]) -> float:
    """Median epoch time without the first epoch (tracing, compilation), if there are more."""
    times = [float(t) for t in record.get("epoch_times_s") or []]
    if not times:
        raise WorkloadError(
            f"record of {record.get('workload')} has no epoch_times_s",
            "scale over cifar10 records written by this version of workloads",
        )
    return statistics.median(times[1:] or times)


def summarise(runs: Sequence[tuple[int, dict[str, Any], str]]) -> list[ScalePoint]:
    """Scale points from ``(count, record, record file name)``, sorted by count."""
    runs = sorted(runs, key=lambda run: run[0])
    if not runs:
        return []
    base_count, base_record, _ = runs[0]
    base_rate = float(base_record["examples_per_sec"])
    points = []
    for count, record, name in runs:
        rate = float(record["examples_per_sec"])
        speedup = rate / base_rate
        points.append(
            ScalePoint(
                count=count,
                epoch_time_s=epoch_time(record),
                images_per_sec=rate,
                speedup=speedup,
                efficiency=speedup / (count / base_count),
                global_batch_size=record.get("global_batch_size"),
                record=name,
            )
        )
    return points


def write_summary(points: Sequence[ScalePoint], plan: StudyPlan, out_dir: Path) -> list[Path]:
    """``scaling.json`` (points and the plan) and ``scaling.csv`` in ``out_dir``."""
    summary = {
        "study": "scaling",
        "created_at": utc_now(),
        "unit": plan.unit,
        "plan": asdict(plan),
        "speedup_definition": "images/s divided by images/s at the smallest count",
        "points": [asdict(p) for p in points],
    }
    json_path = out_dir / SUMMARY_JSON
    atomic_write_bytes(json_path, (json.dumps(summary, indent=2) + "\n").encode())
    csv_path = out_dir / SUMMARY_CSV
    with safefs.writing(csv_path, text=True, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(ScalePoint.__dataclass_fields__))
        writer.writeheader()
        for point in points:
            writer.writerow(asdict(point))
    return [json_path, csv_path]


def read_summary(path: Path) -> tuple[str, list[ScalePoint]]:
    """The unit and points of a ``scaling.json``."""
    try:
        data = read_json(Path(path))
    except (OSError, BadInput) as exc:
        raise WorkloadError(f"{path} {clip(str(exc), 60)}",
                            "point to a study's scaling.json") from exc
    if not isinstance(data, dict) or data.get("study") != "scaling":
        raise WorkloadError(f"{path} is not a scaling summary", "point to a study's scaling.json")
    return data["unit"], [ScalePoint(**p) for p in data["points"]]
