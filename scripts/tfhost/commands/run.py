"""`workloads run IMAGE -- ARGS`: run a benchmark image with GPUs, on the host.

The container is started through the Docker API with the flags NVIDIA's TensorFlow
containers ask for (`--gpus`, `--shm-size=1g`, `--ulimit memlock=-1`, `--ulimit
stack=67108864`), with the results directory mounted at /results and the
calling user's uid:gid, so records come back owned by you. Its log streams
live; the exit code is the container's (124 when --timeout stopped it); the
container is removed at the end and on Ctrl-C. It runs with every capability
dropped and no-new-privileges, on the engine's default network unless
--network says otherwise (host only when asked). While it runs, every requested
GPU is sampled once a second into a CSV beside the record (--no-monitor to
skip; without a GPU the monitor says so and the run goes on). For `accept`
(unless it is given --kernel-log), this boot's kernel log is saved on the host
and mounted read-only at /kernel.log for the XID check (`--kernel-log
/kernel.log`): the container gets no capability to read the host's log itself.

gpus:
  auto   all GPUs when the host has any (NVML), else none (default)
  all    every GPU; fails with a clear message without the NVIDIA Container Toolkit
  0,1    these GPUs (indices as in nvidia-smi, or GPU-/MIG- UUIDs)
  none   no GPU
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from tfhost.commands.common import (
    add_env_option,
    add_memlock_option,
    default_results_dir,
    environment,
    passthrough,
)
from workloads.cli import positive_float

EPILOG = """\
examples:
  workloads run tfhost/workloads:cpu -- check
  workloads run tfhost/workloads:ngc --gpus all -- cifar10 --model resnet50v2 --batch-size 64
  workloads run tfhost/workloads:pip --gpus 0,1 --timeout 3600 -- style --width 512
  workloads run IMAGE --env NGC_API_KEY --results /data/results -- sweep ...
"""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="run a benchmark image with GPUs through the Docker API (host side)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("image", help="image to run, e.g. tfhost/workloads:ngc")
    parser.add_argument("--gpus", default="auto", metavar="auto|all|IDS|none",
                        help="GPUs for the container (default: auto)")
    parser.add_argument("--results", type=Path, metavar="DIR",
                        help="host directory mounted at /results (default: $WORKLOADS_RESULTS "
                             "or ./results)")
    add_env_option(parser)
    add_memlock_option(parser)
    parser.add_argument("--network", metavar="MODE",
                        help="container network: none, host, or a network name (default: the "
                             "engine's default network; host only when asked, since it "
                             "exposes the host's loopback services)")
    parser.add_argument("--timeout", type=positive_float, metavar="SECONDS",
                        help="stop the container after this long (exit code 124)")
    parser.add_argument("--user", metavar="UID:GID",
                        help="user in the container (default: yours, so results are yours)")
    parser.add_argument("--name", help="container name (default: chosen by Docker)")
    parser.add_argument("--no-monitor", action="store_true",
                        help="do not sample the GPUs into a CSV during the run")
    parser.add_argument("--monitor-interval", type=positive_float, default=1.0,
                        metavar="SECONDS", help="GPU sampling interval (default: 1)")
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="-- ARGS",
                        help="the workloads command and its options, after -- (options of "
                             "`run` go before IMAGE or between IMAGE and --)")
    parser.set_defaults(func=run, parser=parser)


def options_after_image(args: argparse.Namespace) -> argparse.Namespace:
    """Parse ``run`` options written between IMAGE and ``--``.

    argparse hands everything after the positional IMAGE to the remainder; with
    a ``--`` present, what precedes it is ours and is parsed again, options
    first. Without ``--`` everything after IMAGE is the command, as in
    ``docker run IMAGE ARGS``.
    """
    rest = list(args.args)
    if "--" not in rest or rest.index("--") == 0:
        return args
    split = rest.index("--")
    return args.parser.parse_args([*rest[:split], args.image, *rest[split:]],
                                  namespace=argparse.Namespace(command=args.command))


def resolve_gpus(text: str) -> Any:
    """``auto`` → all when NVML sees a GPU, else none; anything else as ``parse_gpus``."""
    from tfhost.runner import parse_gpus

    if text.strip().lower() != "auto":
        return parse_gpus(text)
    from workloads.envinfo import nvml_gpus

    _, gpus = nvml_gpus()
    return "all" if gpus else None


def monitor_csv(args: list[str], results: Path) -> Path:
    """Beside the record when ``--output /results/X.json`` is among the args, else dated."""
    from tfhost.monitor import csv_beside
    from tfhost.runner import RESULTS_MOUNT

    for flag, value in itertools.pairwise(args):
        if flag == "--output" and value.startswith(RESULTS_MOUNT + "/"):
            return csv_beside(results / value[len(RESULTS_MOUNT) + 1:])
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return results / f"gpu-monitor-{stamp}.csv"


def with_kernel_log(command: list[str], workdir: Path) -> tuple[list[str], Path | None]:
    """For ``accept``: the command reading a saved copy of this boot's kernel log, and the copy.

    Saved as the calling user into ``workdir`` (private to this run); mounted read-only at
    /kernel.log. A command that names its own --kernel-log FILE with FILE on this host (the
    fix the battery's row gives, saved by root with journalctl) gets FILE mounted there
    instead: the container cannot see the host's paths. One under /results (the container's
    own path) and other commands are left as they are; where this user cannot read the log,
    one line says so and the battery's own kernel-log row fails naming the option.
    """
    from tfhost.runner import KERNEL_LOG_MOUNT, RESULTS_MOUNT
    from workloads.hardware import kernel_log

    if not command or command[0] != "accept":
        return command, None
    for index, arg in enumerate(command):
        if arg != "--kernel-log" and not arg.startswith("--kernel-log="):
            continue
        joined = arg.startswith("--kernel-log=")
        value = arg.split("=", 1)[1] if joined else (
            command[index + 1] if index + 1 < len(command) else "")
        host_file = Path(value)
        if not value or value.startswith(RESULTS_MOUNT + "/") or not host_file.is_file():
            return command, None
        rest = command[index + (1 if joined else 2):]
        return [*command[:index], "--kernel-log", KERNEL_LOG_MOUNT, *rest], host_file
    saved = workdir / "kernel.log"
    why = kernel_log.save_copy(saved)
    if why is not None:
        print(f"workloads run: this boot's kernel log could not be saved for the XID check "
              f"({why[:200]}); its row will fail: run as root or a member of adm or "
              "systemd-journal, or pass -- accept --kernel-log FILE", file=sys.stderr)
        return command, None
    return [*command, "--kernel-log", KERNEL_LOG_MOUNT], saved


def run(args: argparse.Namespace) -> int:
    args = options_after_image(args)
    workdir = Path(tempfile.mkdtemp(prefix="tfhost-run-"))  # 0700: the saved log is private
    try:
        return _run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, workdir: Path) -> int:
    from tfhost.monitor import monitoring
    from tfhost.runner import RunSpec, calling_user
    from tfhost.runner import run as run_container

    command, saved_log = with_kernel_log(passthrough(args.args), workdir)
    gpus = resolve_gpus(args.gpus)
    results = args.results or default_results_dir()
    spec = RunSpec(
        image=args.image,
        command=command,
        gpus=gpus,
        results_dir=results,
        environment=environment(args.env),
        network_mode=args.network,
        user=args.user or calling_user(),
        timeout_s=args.timeout,
        memlock_bytes=args.memlock,
        name=args.name,
        kernel_log=saved_log,
    )
    if gpus is None or args.no_monitor:
        return run_container(spec)
    indices = None if gpus == "all" or not all(g.isdigit() for g in gpus) else [
        int(g) for g in gpus]
    csv_path = monitor_csv(command, results)
    return run_container(
        spec, watch=lambda: monitoring(csv_path, indices, args.monitor_interval)
    )
