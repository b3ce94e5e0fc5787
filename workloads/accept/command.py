"""``workloads accept``: does this host perform as its hardware should, check by check?

A fixed battery, each check measured and compared with the device's own limit
(the datasheet for GPUs in workloads/hardware/reference.yaml, the PCIe link the GPU
can train to, its NVLinks), each with a verdict and a reason:

  matmul     matmul peak per device: float32, TF32 where it exists, bfloat16, float16
  membw      device-memory bandwidth (a large on-device copy)
  transfer   host-to-device and device-to-host copies per GPU, against the PCIe link
  allreduce  sum all-reduce over all local devices, 1 MiB to 1 GiB, algbw and busbw
             as nccl-tests defines them, against NVLink or PCIe
  p2p        a copy between every ordered pair of GPUs (the copy engines, as
             nvbandwidth), each pair against its NVLink or PCIe limit: names a bad link
  training   ResNet50V2 at 128 px, mixed precision (the tutorial CNN on a CPU), MFU
  nvml       per GPU under the battery's load: PCIe link, SM clock, throttle reasons,
             power and temperature, ECC and remapped rows, NVLinks
  errors     XID and SXid events since boot (kernel log) with NVIDIA's action for each,
             NVLink replay/recovery/CRC and PCIe replay counters, PCIe AER counters
  dcgm       DCGM's `dcgmi diag -r LEVEL` verdict, where DCGM is installed
  soak       only with --soak SECONDS or --profile deep: every GPU repeats integer
             matmuls (float32, bfloat16, several shapes) whose exact product the host
             knows, holds half its free memory written with a seeded pattern and read
             back every iteration (silent data corruption, a stuck or flipping bit),
             and the clock watched as the card heats

Profiles: standard (the default: the battery, DCGM level 1, no soak) and deep (DCGM
level 3 and a 300 s soak; --level and --soak still override it).

Verdicts: pass, warn, fail against a limit; info for a figure without one (a CPU, a
GPU not in the table); skip for a check that does not apply. Exit 0 when nothing
fails, 1 when a check fails, 2 on bad input. On a host without a GPU the same
command runs the CPU battery (float32 and bfloat16 matmul, memory, all-reduce over
logical CPU devices, the CNN).
"""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError

EPILOG = """\
examples:
  workloads accept                         the whole battery (under 3 minutes on 8 GPUs)
  workloads accept --quick                 every check, smaller sizes (CI, a first look)
  workloads accept --only matmul membw     just these checks
  workloads accept --level 2 --json        DCGM's medium diagnostic, the record on stdout
  workloads accept --soak 120              the battery, then two minutes of checked matmuls
  workloads accept --profile deep          DCGM level 3 and a 300 s soak (new hosts, RMAs)
"""

PROFILES = {"standard": {"level": 1, "soak": 0.0}, "deep": {"level": 3, "soak": 300.0}}


def register(sub: Any) -> None:
    from workloads.accept.battery import CHECKS

    parser = sub.add_parser(
        "accept",
        help="does this host perform as its hardware should? verdicts against datasheet limits",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every check with smaller sizes (the same code; for CI)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="CHECK",
        default=None,
        help=f"run only these checks: {', '.join(CHECKS)}",
    )
    parser.add_argument(
        "--level",
        type=int,
        choices=(1, 2, 3, 4),
        default=None,
        help="DCGM diagnostic level for `dcgmi diag -r` (default: the profile's; standard 1, "
        "seconds; deep 3, about 15 minutes)",
    )
    parser.add_argument(
        "--soak",
        type=soak_seconds,
        default=None,
        metavar="SECONDS",
        help="after the battery, every GPU repeats one matmul this long and each product "
        "is checked (default: the profile's; standard 0, deep 300)",
    )
    parser.add_argument(
        "--profile",
        choices=tuple(PROFILES),
        default="standard",
        help="standard (default) or deep: DCGM level 3 and a 300 s soak",
    )
    parser.add_argument(
        "--kernel-log",
        type=Path,
        metavar="FILE",
        help="read the XIDs from this saved kernel log (journalctl -k -b or dmesg text) "
        "instead of this boot's journal: for a container, which may not read the host's",
    )
    parser.add_argument(
        "--output", metavar="PATH", help="record path (default: results/accept-HOST-TIME.json)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the record as JSON instead of the table"
    )
    parser.set_defaults(func=run)


def soak_seconds(text: str) -> float:
    """``--soak``: seconds, 0 (none) up to a day; anything else is one line of bad input."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not 0 <= value <= 86_400 or value != value:
        raise argparse.ArgumentTypeError(f"{text[:40]!r}: give 0 to 86400 seconds")
    return value


def selected_checks(only: list[str] | None, soak: float = 0.0) -> list[str]:
    """The checks to run, in battery order; an unknown name is bad input, with a suggestion.

    The soak runs when it is given time (``--soak``, the deep profile), and only then.
    """
    from workloads.accept.battery import CHECKS, ON_REQUEST

    if not only:
        return [c for c in CHECKS if c not in ON_REQUEST or (c == "soak" and soak > 0)]
    names = [n.strip().lower() for item in only for n in item.split(",") if n.strip()]
    if not names:
        raise WorkloadError("--only names no check", f"choose from {', '.join(CHECKS)}")
    for name in names:
        if name not in CHECKS:
            close = difflib.get_close_matches(name, CHECKS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise WorkloadError(
                f"unknown check '{name[:40]}'", f"{hint}choose from {', '.join(CHECKS)}"
            )
    if "soak" in names and soak <= 0:
        raise WorkloadError(
            "--only soak without soak time", "add --soak SECONDS, or --profile deep"
        )
    if soak > 0:
        names.append("soak")
    return [c for c in CHECKS if c in names]


def run(args: argparse.Namespace) -> int:
    import platform

    from workloads.records import default_output, ensure_writable, new_record, write_record

    profile = PROFILES[args.profile]
    level = args.level if args.level is not None else int(profile["level"])
    soak = args.soak if args.soak is not None else float(profile["soak"])
    only = selected_checks(args.only, soak)
    if args.kernel_log is not None and not args.kernel_log.is_file():
        what = "not a regular file" if args.kernel_log.exists() else "no such file"
        raise WorkloadError(
            f"--kernel-log {str(args.kernel_log)[:120]}: {what}",
            "give a saved kernel log (journalctl -k -b > FILE), or leave the option out",
        )
    output = ensure_writable(
        Path(args.output) if args.output else default_output("accept", platform.node() or "host")
    )
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if backend not in ("tensorflow", "jax"):
        raise WorkloadError(
            f"`workloads accept` measures with TensorFlow or JAX, not KERAS_BACKEND={backend}",
            "unset KERAS_BACKEND (TensorFlow) or set KERAS_BACKEND=jax",
        )
    if backend == "jax":
        from workloads.accept.backends import prepare_jax_cpu_devices

        prepare_jax_cpu_devices(4 if not args.quick else 2)

    from workloads.accept import battery
    from workloads.accept import output as out
    from workloads.envinfo import collect_env
    from workloads.hardware.reference import load

    record = new_record("accept")
    outcome = battery.run(
        only,
        args.quick,
        level,
        backend,
        load(),
        battery.Progress(enabled=not args.json),
        soak_seconds=soak,
        kernel_log=args.kernel_log,
    )
    record.update(out.record_fields(outcome, args.quick, only, level))
    record.update(profile=args.profile, soak_s=soak)
    record["reference_documents"] = load().documents  # what the rows' [key, date] refer to
    record["env"] = collect_env()
    record["status"] = "done"
    write_record(record, output)
    if args.json:
        from workloads.records import to_json

        print(to_json(record), end="", flush=True)
    else:
        out.print_table(outcome, f"workloads accept ({record['mode']}, {outcome.backend or '-'})")
        print(f"record: {output}")
    return out.exit_code(outcome.findings)
