"""Run the ``workloads`` CLI with the host-side commands, in-process or as a process.

The host commands live in scripts/tfhost and register into the same
``workloads`` CLI. Until the CLI's command table names them, these helpers
add them, so the tests exercise the real parser and error handling either way.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
HOST_COMMANDS = {name: f"tfhost.commands.{name}" for name in ("run", "scale", "monitor")}

_LAUNCHER = (
    "import sys\n"
    "from workloads import cli\n"
    f"for name, module in {HOST_COMMANDS!r}.items():\n"
    "    cli.COMMANDS.setdefault(name, module)\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def ensure_importable() -> None:
    """Make ``tfhost`` importable from scripts/ (until the package config names it)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))


def run_in_process(argv: Sequence[str]) -> int:
    """``workloads ARGV`` in this process; returns the exit code."""
    from workloads import cli

    for name, module in HOST_COMMANDS.items():
        cli.COMMANDS.setdefault(name, module)
    try:
        return cli.main(list(argv))
    except SystemExit as exc:  # argparse errors
        return int(exc.code or 0)


def command(argv: Sequence[str]) -> list[str]:
    """The argv of a ``workloads ARGV`` process."""
    return [sys.executable, "-c", _LAUNCHER, *argv]


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPTS), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


def run_process(argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """``workloads ARGV`` as a child process, output captured as text."""
    env = environment(**kwargs.pop("env", {}))
    return subprocess.run(command(argv), env=env, capture_output=True, text=True, check=False,
                          **kwargs)
