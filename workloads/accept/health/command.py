"""``workloads health``: the quick node health check, and SLURM's HealthCheckProgram.

A few seconds, no benchmark, nothing loaded on the GPUs; read-only except for its state
file (and, with --slurm, the node's state in SLURM):

  GPUs         the NVIDIA GPUs on the PCI bus (sysfs) against those NVML can reach:
               a GPU that fell off the bus or a driver not loaded fails
  memory       per GPU, uncorrectable ECC errors since the driver loaded, pending or
               failed row remaps, pending page retirements (as `workloads accept`)
  kernel log   XID and SXid events since the last run (journalctl -k -b, else dmesg),
               each with NVIDIA's meaning and action; one that needs a reset or a
               reboot stays failed until a reboot or --clear
  signals      inactive NVLinks, HW thermal / power-brake slowdown (NVML's clock event
               reasons), a PCIe link narrower than the GPU can train (all fail), the
               GPU count against --expect-gpus
  links        NVLink replay/recovery/CRC counters (warn at 5: Imbue), PCIe replays
               per minute since the last run (warn above 8: NVIDIA/DCGM), PCIe AER
               counters of each GPU and the port above it (fatal fails)

Verdicts as in `workloads accept`. Exit 0 when nothing fails, 1 when something fails,
2 on bad input. With --slurm the node is drained when something fails, with the oldest
failure as its reason ("workloads-health: FAULT; WHERE; ACTION; since TIME", the grammar in
scripts/slurm/README.md, kept while the fault stays open), and resumed when a run passes,
only if this check drained it (a node an administrator drained, a DOWN node and one waiting
for a reboot are left alone); the exit is then 0 once the node's state is right, 2 if
scontrol could not be reached. The
run ends within --deadline seconds (slurmd kills a HealthCheckProgram after 60).

State (--state, default /var/lib/workloads/health-state.json, root's, mode 0600): the
kernel-log cursor of this boot, the failures still open, the last PCIe replay counts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workloads import printable
from workloads.errors import WorkloadError

EPILOG = """\
examples:
  workloads health                         check this node now (exit 1 if it fails)
  workloads health --since-boot            every XID since boot, not only the new ones
  workloads health --clear                 after resetting a GPU: forget its open XIDs
  workloads health --slurm                 drain or resume this node (HealthCheckProgram)
  workloads health --json                  the findings as JSON
  workloads health --expect-gpus 8         fail when fewer than 8 GPUs are there
  workloads health --expect-gpus-from results/accept-gpu01-20261207T1000.json
                                           the count the node's acceptance record has

in slurm.conf (scripts/slurm/README.md has the details):
  HealthCheckProgram=/etc/slurm/workloads-health-check
  HealthCheckInterval=300
  HealthCheckNodeState=ANY
"""


def _seconds(text: str) -> float:
    from workloads.cli import positive_float

    value = positive_float(text)
    if value > 600:
        raise argparse.ArgumentTypeError(f"must be at most 600 s, got {text}")
    return value


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text[:20]}") from None
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError(f"must be 1 to 64, got {value}")
    return value


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "health",
        help="quick node health check (XIDs, ECC, link errors); SLURM drains what fails",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--slurm", action="store_true",
                        help="drain this node on failure; resume it on a pass if this check "
                        "drained it")
    parser.add_argument("--node", metavar="NAME",
                        help="SLURM node name (default: $SLURMD_NODENAME, else hostname -s)")
    parser.add_argument("--clear", action="store_true",
                        help="forget the failures still open (after the GPU was reset), then check")
    parser.add_argument("--since-boot", action="store_true",
                        help="judge every XID since boot and leave the state file as it is")
    parser.add_argument("--deadline", type=_seconds, default=40.0, metavar="SECONDS",
                        help="finish within this many seconds (default 40; slurmd allows 60)")
    parser.add_argument("--state", type=Path, metavar="FILE",
                        help="state file (default /var/lib/workloads/health-state.json)")
    parser.add_argument("--kernel-log", type=Path, metavar="FILE",
                        help="read this saved kernel log (dmesg or journalctl text) instead "
                        "of this boot's journal")
    parser.add_argument("--sysfs-pci", type=Path, metavar="DIR",
                        help="PCI devices directory (default /sys/bus/pci/devices)")
    parser.add_argument("--expect-gpus", type=_count, metavar="N",
                        help="the GPUs this node should have: fewer on the bus and in NVML fail "
                        "(a GPU that never enumerates is missing from both)")
    parser.add_argument("--expect-gpus-from", type=Path, metavar="RECORD",
                        help="take the expected GPU count from a `workloads accept` record of "
                        "this node (its GPU devices)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.set_defaults(func=run)


def _check_inputs(args: argparse.Namespace) -> None:
    if args.kernel_log is not None and not args.kernel_log.is_file():
        what = "not a regular file" if args.kernel_log.exists() else "no such file"
        raise WorkloadError(
            f"--kernel-log {str(args.kernel_log)[:200]}: {what}",
            "give a saved kernel log, or leave the option out to read this boot's journal",
        )
    if args.sysfs_pci is not None and not args.sysfs_pci.is_dir():
        raise WorkloadError(
            f"--sysfs-pci {str(args.sysfs_pci)[:200]}: not a directory",
            "give a directory of PCI devices (like /sys/bus/pci/devices), or leave it out",
        )
    if args.state is not None and (args.state.name in ("", ".", "..") or args.state.is_dir()):
        raise WorkloadError(f"--state {str(args.state)[:200]} is a directory",
                            "give the path of a file (it is created)")


def expected_from_record(path: Path) -> int:
    """The GPUs a ``workloads accept`` record of this node counted (its ``devices`` that are
    GPUs: a label "GPU n" with an NVML index); bad input is one line."""
    from workloads.bounded import BadInput, read_json

    fix = "give the JSON record `workloads accept` wrote for this node (results/accept-*.json)"
    try:  # every record's reader: a regular file, no link followed, the record cap
        record = read_json(path)
    except OSError as exc:
        raise WorkloadError(f"--expect-gpus-from {str(path)[:200]}: {exc.strerror}", fix) from None
    except BadInput as exc:  # "not JSON" short, so a long path cannot crowd it out of the line
        problem = "not JSON" if "JSON" in str(exc) else str(exc).removeprefix("is ")
        raise WorkloadError(f"--expect-gpus-from {str(path)[:200]}: {problem}", fix) from None
    except ValueError:
        raise WorkloadError(f"--expect-gpus-from {str(path)[:200]}: not JSON", fix) from None
    devices = record.get("devices") if isinstance(record, dict) else None
    if not isinstance(devices, list):
        raise WorkloadError(f"--expect-gpus-from {str(path)[:200]}: no devices list", fix)
    gpus = [d for d in devices if isinstance(d, dict) and str(d.get("label", "")).startswith(
        "GPU ") and d.get("nvml_index") is not None]
    if not gpus:
        raise WorkloadError(f"--expect-gpus-from {str(path)[:200]}: the record counts no GPU",
                            "give a record made on this node's GPUs, or --expect-gpus N")
    return len(gpus)


def _reasons(done: Any) -> list[str]:
    """One drain reason per failure, oldest first (the first is the one a drain names)."""
    from workloads.accept.health import check, reasons, slurm
    from workloads.accept.verdicts import FAIL

    failures = [f for f in done.findings if f.verdict == FAIL]
    causes = [reasons.cause(f, done.gpus, check.first_seen(done.state, f)) for f in failures]
    causes.sort(key=lambda c: c.since)  # stable: in a run's own order when found together
    return [slurm.reason(c, len(causes) - 1) for c in causes]


def run(args: argparse.Namespace, nvml: Any = None) -> int:
    from workloads.accept.health import check, slurm, state
    from workloads.accept.verdicts import FAIL, SEVERITY, worst
    from workloads.hardware import aer

    _check_inputs(args)
    if args.expect_gpus_from is not None:
        if args.expect_gpus is not None:
            raise WorkloadError("--expect-gpus and --expect-gpus-from both given",
                                "give one: the count, or the record to take it from")
        args.expect_gpus = expected_from_record(args.expect_gpus_from)
    node = slurm.node_name(args.node) if args.slurm else None
    if args.slurm:
        slurm.scontrol()  # before reading anything: a missing scontrol is bad input
    path = args.state or state.DEFAULT
    try:
        state.prepare(path)
    except OSError as exc:  # the state's directory cannot be made or written: one line
        raise WorkloadError(
            f"cannot keep the state file {path}: {exc.strerror or exc}",
            "run as root (the health check is root's), or give --state FILE in a directory "
            "of yours",
        ) from None
    # The deadline's shares: a quarter to wait for another run's lock, half for the readings,
    # a tenth for each scontrol call; what is left covers Python's own start.
    with state.locked(path, args.deadline * 0.25):
        kept = state.load(path)
        cleared = []
        if args.clear:
            cleared, kept.open = kept.open, []
        done = check.run(
            kept,
            kernel_log_path=args.kernel_log,
            sysfs=args.sysfs_pci or aer.SYSFS_PCI,
            deadline_s=args.deadline * 0.5,
            since_boot=args.since_boot,
            nvml=nvml,
            expect_gpus=args.expect_gpus,
        )
        if not args.since_boot or args.clear:
            try:
                state.save(path, done.state)
            except OSError as exc:  # a full disk: say so, the findings are still printed below
                kept.note = f"the state file {path} was not written: {exc.strerror or exc}"
    verdict = worst(f.verdict for f in done.findings)
    failures = [f for f in done.findings if f.verdict == FAIL]
    action = None
    if node is not None:
        timeout = max(2.0, args.deadline * 0.1)
        action = slurm.act(node, _reasons(done), timeout)
    if args.json:
        record = {
            "verdict": verdict,
            "seconds": round(done.seconds, 3),
            "kernel_log": done.scan.source,
            "findings": [f.as_dict() for f in done.findings],
            "cleared": [o.__dict__ for o in cleared],
            "slurm": action,
            "note": kept.note,
        }
        print(json.dumps(record, indent=1, default=str))
    else:
        if kept.note:
            print(f"note: {printable.line(kept.note, 400)}")
        for item in cleared:
            print(f"cleared: {printable.line(item.device)} {printable.line(item.item)} "
                  f"({printable.line(item.action)})")
        shown = sorted(done.findings, key=lambda f: -SEVERITY[f.verdict])
        for f in shown:
            if f.verdict in (FAIL, "warn") or len(shown) < 12:
                print(f"{f.verdict.upper():5} {printable.line(f.device):>14}  "
                      f"{printable.line(f.item):<14} {printable.line(f.reason, 400)}")
        print(f"{verdict.upper()}: {len(failures)} failing, {done.seconds:.1f} s"
              f" ({printable.line(done.scan.source, 400)})")
        if action:  # it quotes the reason another operator drained the node with
            print(f"slurm: {printable.line(action, 600)}")
    sys.stdout.flush()
    if node is not None:
        return 0
    return 1 if failures else 0
