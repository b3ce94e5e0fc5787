"""``workloads``: one command line for every benchmark and study in the images.

Each subcommand lives in its own module exposing ``register(subparsers)``; the
module must not import a deep-learning framework at import time, so that
``workloads --help`` answers instantly and ``sweep`` can set
``CUDA_VISIBLE_DEVICES`` for its workers before any framework starts.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from workloads import __version__
from workloads.errors import OutOfMemory, WorkloadError, is_out_of_memory

# Subcommand name -> module defining register(subparsers). Order is --help order.
COMMANDS: dict[str, str] = {
    "check": "workloads.check",
    "accept": "workloads.accept.command",
    "health": "workloads.accept.health.command",
    "cifar10": "workloads.cifar10.command",
    "style": "workloads.style.command",
    "sweep": "workloads.sweep.command",
    "report": "workloads.report.command",
    "bench": "workloads.bench",
    # host side (scripts/tfhost): run the images, scale across GPUs, sample NVML
    "run": "tfhost.commands.run",
    "scale": "tfhost.commands.scale",
    "monitor": "tfhost.commands.monitor",
}

# The commands that drive a Docker engine from the host. The images set
# WORKLOADS_HOST_COMMANDS=0: inside a container there is no engine to drive, so
# there these commands only say where to run them.
HOST_COMMANDS = ("run", "scale", "monitor")

DESCRIPTION = """\
Benchmarks and studies for TensorFlow GPU hosts.

Run `workloads COMMAND --help` for the options of a command. Every run writes a
JSON record (and appends it to records.jsonl beside it); bad input ends with one
line naming the problem and the fix, and exit code 2.
"""

EPILOG = """\
examples:
  workloads check --require-gpu          verify a freshly provisioned GPU host
  workloads cifar10 --model cnn --data synthetic --epochs 2 --steps-per-epoch 30
  workloads cifar10 --model resnet50v2 --gpus 4 --batch-size 64 --precision mixed
  workloads style --output out.png       style transfer on the bundled sample images

environment:
  KERAS_BACKEND      tensorflow (default), jax or torch for the Keras-3 workloads
  WORKLOADS_CACHE    download cache (CIFAR-10 archive, VGG19 weights); default ~/.cache/workloads
  WORKLOADS_RESULTS  default directory for records; default ./results
  WORKLOADS_DOWNLOAD_DEADLINE_S, WORKLOADS_DOWNLOAD_MIN_RATE, WORKLOADS_DOWNLOAD_RATE_WINDOW_S
                     a download's deadline (3600 s) and minimum rate (50000 bytes/s over 30 s)
  WORKLOADS_WORKER_BIND  SLURM multi-worker runs: node (default) keeps each TensorFlow
                     worker on its node's address; any listens on every interface
  WORKLOADS_WORKER_ADDRESS  that node address (default: the route to the job's other nodes)
  WORKLOADS_BIND_SHIM    a built libbindaddr.so for that (default: built with cc into a
                     private directory under WORKLOADS_CACHE or ~/.cache/workloads)
"""


# argparse's "invalid choice: 'x' (choose from 'a', 'b', ...)" (Python 3.11 and 3.12 quoting)
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>.*)' \(choose from (?P<choices>.*)\)$")
LONG_LINE = 160  # an error line longer than this lists no choices; '--help' has them


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line with the way to get help."""

    def error(self, message: str) -> NoReturn:
        line = f"{self.prog}: error: {message}; see '{self.prog} --help'"
        match = _INVALID_CHOICE.search(message)
        if match and len(line) > LONG_LINE:
            # Every choice would make the line too long to read: the closest ones instead.
            choices = re.findall(r"'([^']*)'", match["choices"])
            close = difflib.get_close_matches(match["value"], choices, n=3)
            hint = f" (did you mean {' or '.join(close)}?)" if close else ""
            message = message[: match.start("value") - 1] + f"'{match['value']}'{hint}"
            line = f"{self.prog}: error: {message}; see '{self.prog} --help'"
        self.exit(2, line + "\n")


def positive_int(text: str) -> int:
    """argparse type: an integer > 0, with a message that says so."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a float >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a float > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:  # also rejects NaN
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def unit_float(text: str) -> float:
    """argparse type: a float in [0, 1]."""
    value = non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def build_parser() -> Parser:
    parser = Parser(
        prog="workloads",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"workloads {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    in_image = os.environ.get("WORKLOADS_HOST_COMMANDS") == "0"
    for name, module_name in COMMANDS.items():
        if in_image and name in HOST_COMMANDS:
            register_host_only(sub, name)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):  # command not in this build
                continue
            raise
        module.register(sub)
    return parser


def register_host_only(sub: Any, name: str) -> None:
    """``name`` inside an image: listed, but running it says to run it on the host."""
    # No option prefix: whatever follows (--gpus 0 ...) is taken as is, never an argparse error.
    parser = sub.add_parser(
        name, help="host only: drives the Docker engine (not in an image)", prefix_chars="\0"
    )
    parser.add_argument("ignored", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def refuse(_: argparse.Namespace) -> int:
        raise WorkloadError(
            f"`workloads {name}` drives the host's Docker engine; this is an image",
            "run it on the host (scripts/bootstrap.sh cpu, then .venv/bin/workloads)",
        )

    parser.set_defaults(func=refuse)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script and of ``python -m workloads``."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ chatter out of the output
    parser = build_parser()
    args = parser.parse_args(argv)
    prog = f"workloads {args.command}"
    func: Any = args.func
    try:
        return int(func(args) or 0)
    except WorkloadError as exc:
        print(f"{prog}: error: {exc.one_line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted; results written so far are kept", file=sys.stderr)
        return 130
    except Exception as exc:
        if is_out_of_memory(exc):
            oom = OutOfMemory(
                "out of memory", "lower the per-replica --batch-size (or the image --width)"
            )
            print(f"{prog}: error: {oom.one_line()}", file=sys.stderr)
            return oom.exit_code
        raise


if __name__ == "__main__":
    sys.exit(main())
