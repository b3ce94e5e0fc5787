"""Argument helpers shared by the host-side commands."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError


def passthrough(args: Sequence[str]) -> list[str]:
    """The arguments after ``--`` (argparse.REMAINDER keeps the ``--`` itself)."""
    args = list(args)
    return args[1:] if args[:1] == ["--"] else args


def environment(items: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` as given; a bare ``KEY`` takes the value from this shell.

    The bare form keeps secrets (an NGC API key, a token) out of the process
    list and the shell history, as ``docker run -e KEY`` does.
    """
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not key or not key.replace("_", "a").isalnum() or key[0].isdigit():
            raise WorkloadError(f"--env {item!r}: {key!r} is not a variable name",
                                "write --env NAME=VALUE or --env NAME")
        if not sep:
            if key not in os.environ:
                raise WorkloadError(f"--env {key}: {key} is not set in this shell",
                                    f"export {key} first or write --env {key}=VALUE")
            value = os.environ[key]
        env[key] = value
    return env


def default_results_dir() -> Path:
    """``$WORKLOADS_RESULTS`` or ``./results``, as in the images."""
    return Path(os.environ.get("WORKLOADS_RESULTS", "results"))


def memlock(text: str) -> int:
    """argparse type: ``unlimited`` (-1, seed 001's flag) or a number of bytes > 0."""
    if text.strip().lower() in {"unlimited", "-1"}:
        return -1
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither 'unlimited' nor bytes") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be 'unlimited' or > 0 bytes, got {value}")
    return value


def add_memlock_option(parser: Any) -> None:
    parser.add_argument("--memlock", type=memlock, default=-1, metavar="BYTES|unlimited",
                        help="locked-memory limit of the container (default: unlimited, "
                             "for pinned host buffers)")


def add_env_option(parser: Any) -> None:
    parser.add_argument("--env", "-e", action="append", default=[], metavar="KEY[=VALUE]",
                        help="environment variable for the container; a bare KEY passes this "
                             "shell's value without showing it (repeatable)")
