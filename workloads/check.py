"""``workloads check``: is this host (or container) ready to run the benchmarks?

The usual "does TensorFlow see the GPU" test, made useful after provisioning:
list every device with its name, compute capability and memory, print the CUDA/cuDNN versions the
TensorFlow build expects, refuse GPUs below compute capability 5.2, and run a
small matmul on every device, comparing it with NumPy. ``--require-gpu`` turns
"no GPU" into a failure, which is what the Ansible ``gpu_validate`` role runs.

It also prints each device's measured matmul peak (FLOP/s) in float32 and in
the mixed-precision dtype (float16 on GPUs, bfloat16 on CPUs): the roofline the
``cifar10`` and ``style`` records divide by for their MFU. Measured once per
device and dtype and cached in ``$WORKLOADS_CACHE/peak-flops.json``. A peak
measured while other processes used the CPU (or the GPU) is provisional: shown as
such, and measured again on the next run; ``--refresh-peak`` measures again now.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from workloads.errors import WorkloadError

MATMUL_SIZE = 512


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "check",
        help="list devices, check compute capability, run a matmul on each",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--require-gpu",
        action="store_true",
        help="exit non-zero when no GPU is visible (use after provisioning a GPU host)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the report as JSON instead of a table"
    )
    parser.add_argument(
        "--refresh-peak",
        action="store_true",
        help="measure the matmul peaks again instead of reading the cache",
    )
    parser.set_defaults(func=run)


def matmul_check(tf: Any, np: Any, device: str) -> dict[str, Any]:
    """Multiply two seeded matrices on ``device``; compare with NumPy in float64."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE)).astype("float32")
    b = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE)).astype("float32")
    with tf.device(device):
        start = time.perf_counter()
        result = tf.linalg.matmul(tf.constant(a), tf.constant(b)).numpy()
        seconds = time.perf_counter() - start
    expected = a.astype("float64") @ b.astype("float64")
    # TF32 on Ampere+ rounds inputs to 10 mantissa bits: allow for it.
    error = float(np.max(np.abs(result - expected)) / np.max(np.abs(expected)))
    return {"device": device, "ok": bool(error < 1e-2), "max_rel_error": error, "seconds": seconds}


def measure_peaks(tf: Any, device: str, name: str, mixed: str, refresh: bool) -> dict[str, Any]:
    """The device's matmul peak in float32 and in its mixed-precision dtype (cached)."""
    from workloads.roofline import peak_flops

    peaks: dict[str, Any] = {"device": device}
    busy: dict[str, str] = {}
    with tf.device(device):
        for dtype in ("float32", mixed):
            entry = peak_flops(name, dtype, refresh=refresh)
            peaks[dtype] = entry["flops"]
            if entry.get("provisional"):
                busy[dtype] = entry.get("busy_reason") or "the host was busy"
    if busy:  # measured again next time; an MFU divided by it is an upper bound
        peaks["provisional"] = busy
    return peaks


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import tensorflow as tf

    from workloads.devices import require_supported, setup_tensorflow
    from workloads.envinfo import collect_env, cpu_model

    gpus = setup_tensorflow(tf)
    env = collect_env()
    report: dict[str, Any] = {
        "tensorflow": tf.__version__,
        "cuda_build": env["cuda_build"],
        "cudnn_build": env["cudnn_build"],
        "driver": env["driver"],
        "cpu": cpu_model(),
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "compute_capability": g.capability_text,
                "memory_total_bytes": g.memory_total_bytes,
            }
            for g in gpus
        ],
        "matmul": [],
    }
    if args.require_gpu and not gpus:
        _print(report, args.json)
        raise WorkloadError(
            "no GPU is visible to TensorFlow",
            "check `nvidia-smi`, the container's --gpus flag and that tensorflow[and-cuda] "
            "(not tensorflow-cpu) is installed",
        )
    require_supported(gpus)
    targets = [f"/GPU:{g.index}" for g in gpus] or ["/CPU:0"]
    report["matmul"] = [matmul_check(tf, np, device) for device in targets]
    report["ok"] = all(m["ok"] for m in report["matmul"])
    names = [g.name for g in gpus] or [report["cpu"]]
    report["peak_flops"] = [
        measure_peaks(tf, device, name, "float16" if gpus else "bfloat16", args.refresh_peak)
        for device, name in zip(targets, names, strict=True)
    ]
    _print(report, args.json)
    if not gpus:
        print("no GPU visible: the matmul ran on the CPU", file=sys.stderr)
    for peaks in report["peak_flops"]:
        for dtype, why in peaks.get("provisional", {}).items():
            print(
                f"note: the {dtype} peak of {peaks['device']} is provisional ({why} while it "
                "was measured); it is measured again on the next run",
                file=sys.stderr,
            )
    if not report["ok"]:
        bad = ", ".join(m["device"] for m in report["matmul"] if not m["ok"])
        raise WorkloadError(
            f"matmul result wrong on {bad}", "check the driver and the GPU's health"
        )
    return 0


def _print(report: dict[str, Any], as_json: bool) -> None:
    if as_json:
        # Flushed at once: a note on stderr must come after the whole document,
        # never inside it, when a caller merges the two streams.
        print(json.dumps(report, indent=2), flush=True)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(
        f"TensorFlow {report['tensorflow']}  built for CUDA {report['cuda_build'] or '-'}"
        f"  cuDNN {report['cudnn_build'] or '-'}  driver {report['driver'] or '-'}"
    )
    table = Table(title="Devices")
    for column in ("device", "name", "compute capability", "memory", "matmul", "peak"):
        table.add_column(column)
    results = {m["device"]: m for m in report["matmul"]}
    peaks = {p["device"]: p for p in report.get("peak_flops", [])}
    for gpu in report["gpus"]:
        mem = gpu["memory_total_bytes"]
        m = results.get(f"/GPU:{gpu['index']}")
        table.add_row(
            f"GPU {gpu['index']}",
            gpu["name"],
            gpu["compute_capability"],
            f"{mem / 2**30:.1f} GiB" if mem else "-",
            _matmul_text(m),
            _peak_text(peaks.get(f"/GPU:{gpu['index']}")),
        )
    if not report["gpus"]:
        table.add_row(
            "CPU",
            report["cpu"],
            "-",
            "-",
            _matmul_text(results.get("/CPU:0")),
            _peak_text(peaks.get("/CPU:0")),
        )
    console.print(table)


def _matmul_text(m: dict[str, Any] | None) -> str:
    if m is None:
        return "-"
    return f"{'ok' if m['ok'] else 'WRONG'} (rel. error {m['max_rel_error']:.1e})"


def _peak_text(peaks: dict[str, Any] | None) -> str:
    if not peaks:
        return "-"
    busy = peaks.get("provisional", {})
    return ", ".join(
        f"{dtype} {value / 1e9:,.0f} GFLOP/s" + (" (provisional)" if dtype in busy else "")
        for dtype, value in peaks.items()
        if dtype not in ("device", "provisional")
    )
