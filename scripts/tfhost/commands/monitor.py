"""`workloads monitor`: sample every GPU once a second into a CSV, like `nvidia-smi dmon`.

With a command after `--`, the GPUs are sampled while it runs and the
command's exit code is returned; without one, sampling goes on until Ctrl-C.
Columns: SM %, memory %, memory used and total (MiB), power (W), temperature
(°C), SM and memory clocks (MHz), per GPU and second. Without a GPU (no
driver, no NVML) it says so once and the command still runs.
"""

from __future__ import annotations

import argparse
import subprocess
import threading
from pathlib import Path
from typing import Any

from tfhost.commands.common import passthrough
from workloads.cli import positive_float
from workloads.errors import WorkloadError

EPILOG = """\
examples:
  workloads monitor --csv results/r50.gpu.csv -- workloads cifar10 --model resnet50v2 \\
      --output results/r50.json
  workloads monitor --csv gpu.csv --gpus 0,1          (until Ctrl-C)
  workloads report results/r50.gpu.csv                (utilisation over time as a PNG)
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "monitor",
        help="sample GPU utilisation, memory, power, clocks once a second into a CSV",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--csv", type=Path, required=True, metavar="PATH",
                        help="CSV to write (put it beside the run's record: RUN.gpu.csv)")
    parser.add_argument("--gpus", metavar="IDS", help="GPU indices to watch (default: all)")
    parser.add_argument("--interval", type=positive_float, default=1.0, metavar="SECONDS",
                        help="sampling interval (default: 1)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="-- COMMAND",
                        help="command to run while sampling, after --")
    parser.set_defaults(func=run)


def parse_indices(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        indices = [int(part) for part in text.split(",")]
    except ValueError:
        raise WorkloadError(f"--gpus {text!r} is not a list of GPU indices",
                            "write it like --gpus 0,1 (see nvidia-smi -L)") from None
    if min(indices) < 0 or len(set(indices)) != len(indices):
        raise WorkloadError(f"--gpus {text!r} must be distinct indices >= 0", "list each GPU once")
    return indices


def run(args: argparse.Namespace) -> int:
    from tfhost.monitor import monitoring

    command = passthrough(args.args)
    indices = parse_indices(args.gpus)
    if args.csv.exists() and args.csv.is_dir():
        raise WorkloadError(f"--csv {args.csv} is a directory", "give a file name such as gpu.csv")
    with monitoring(args.csv, indices, args.interval) as monitor:
        if command:
            try:
                return subprocess.run(command, check=False).returncode
            except FileNotFoundError:
                raise WorkloadError(f"command {command[0]!r} not found",
                                    "check the command after --") from None
        if monitor is None:
            return 0
        print(f"sampling into {args.csv}; Ctrl-C to stop", flush=True)
        threading.Event().wait()  # until KeyboardInterrupt; the with block stops the sampler
    return 0
