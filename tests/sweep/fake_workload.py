"""A stand-in workload for the sweep tests, run as ``python -m tests.sweep.fake_workload``.

It follows the workloads command contract (``register(subparsers)``, ``--output``,
a JSON record beside the output, exit 2 on a WorkloadError, 3 on out-of-memory)
and tells the tests what the sweep gave it: the ``CUDA_VISIBLE_DEVICES`` it saw,
its slot, its pid and when it ran. Each start and end is appended to the file in
``$FAKE_CALLS_LOG``, so a test can count how often every pset really ran. No
framework is imported: these tests are about the sweep, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from workloads.cli import Parser, non_negative_float, positive_int
from workloads.errors import OutOfMemory, WorkloadError
from workloads.records import new_record, write_record


def register(sub: Any) -> None:
    parser = sub.add_parser("fake", help="sweep test workload")
    parser.add_argument("--value", type=float, default=1.0, help="any number; < 0 fails")
    parser.add_argument("--sleep", type=non_negative_float, default=0.0)
    parser.add_argument("--color", choices=("red", "green", "blue"), default="red")
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[1])
    parser.add_argument("--flag", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--tokens", type=Path, default=None,
                        help="finish only after taking a token file from this directory "
                             "(or once it holds 'open'): lets a test decide how many runs end")
    parser.add_argument("--crash", action="store_true", help="die by SIGSEGV")
    parser.add_argument("--oom", action="store_true", help="fail as out of memory")
    parser.add_argument("--output", type=Path, required=True)
    parser.set_defaults(func=run)


def _log_call(event: str, output: Path) -> None:
    path = os.environ.get("FAKE_CALLS_LOG")
    if path:
        line = json.dumps({"event": event, "output": str(output), "pid": os.getpid(),
                           "time": time.time(),
                           "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n"
        with open(path, "a") as fh:
            fh.write(line)


TOKEN_WAIT_S = 300.0


def _take_token(directory: Path) -> None:
    """Block until a token in ``directory`` is ours (unlinked by us) or it holds ``open``.

    Whether a run ends before a test kills its sweep is then the test's decision,
    not a race against the machine's load.
    """
    deadline = time.monotonic() + TOKEN_WAIT_S
    while time.monotonic() < deadline:
        if (directory / "open").exists():
            return
        for token in sorted(directory.glob("token-*")):
            try:
                token.unlink()
            except FileNotFoundError:
                continue  # another run took it first
            return
        time.sleep(0.05)
    raise WorkloadError(f"no token in {directory} within {TOKEN_WAIT_S:g} s",
                        "the test must add a token or 'open'")


def run(args: argparse.Namespace) -> int:
    started = time.time()
    _log_call("start", args.output)
    time.sleep(args.sleep)
    if args.tokens is not None:
        _take_token(args.tokens)
    if args.value < 0:
        raise WorkloadError(f"--value {args.value} is negative", "use a value >= 0")
    if args.oom:
        raise OutOfMemory("out of memory", "lower the --sizes")
    if args.crash:
        os.kill(os.getpid(), signal.SIGSEGV)
    record = new_record(
        "fake",
        params={"value": args.value, "color": args.color},
        visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        slot=os.environ.get("WORKLOADS_SWEEP_SLOT"),
        intra_threads=os.environ.get("TF_NUM_INTRAOP_THREADS"),
        pid=os.getpid(),
        began=started,
        ended=time.time(),
        losses={"total": args.value**2, "content": args.value},
        loss_history=[args.value * 2, args.value],
    )
    record["status"] = "ok"
    if args.output.suffix == ".png":
        from PIL import Image

        shade = int(min(abs(args.value), 1.0) * 255)
        colour = {"red": (shade, 0, 0), "green": (0, shade, 0), "blue": (0, 0, shade)}
        Image.new("RGB", (24, 16), colour[args.color]).save(args.output)
        write_record(record, args.output.with_suffix(".json"))
    else:
        write_record(record, args.output)
    _log_call("end", args.output)
    return 0


def main() -> int:
    parser = Parser(prog="fake")
    sub = parser.add_subparsers(dest="command", parser_class=Parser)
    register(sub)
    args = parser.parse_args(["fake", *sys.argv[1:]])
    try:
        return run(args)
    except WorkloadError as exc:
        print(f"fake: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
