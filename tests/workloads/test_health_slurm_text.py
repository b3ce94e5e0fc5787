"""`workloads health` prints the reason another operator drained the node with as a line.

That reason is text ``scontrol show node`` gives back as it was set (``scontrol update
Reason=...`` by anyone Slurm lets drain nodes): it reached the terminal raw in the
``slurm:`` line. The family: reasons holding ESC sequences, BEL, CR, a C1 CSI, Unicode
line and paragraph separators, a bidi override and a zero-width joiner, from a stand-in
``scontrol`` on PATH (a real executable printing Slurm's ``show node`` multi-line form,
as scontrol(1) documents it); the check runs through the real health command.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.workloads import kernel_log_fixture as klog
from tests.workloads.conftest import REPO
from tests.workloads.test_health import gpus, node  # noqa: F401  (node: the fixture)
from workloads.accept.health import command, slurm
from workloads.cli import build_parser

REASONS = ["\x1b[2J\x1b[31mdisk\x07 full", "a\rb", "x\x9b31m", "one\u2028two\u2029three",
           "\u202eevil", "zero\u200djoin", "\x1b]0;title\x07"]


def _scontrol(directory: Path, reason: str) -> None:
    directory.mkdir(exist_ok=True)
    script = directory / "scontrol"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "if sys.argv[1:2] == ['show']:\n"
        "    print('NodeName=gpu01 Arch=x86_64 CoresPerSocket=8')\n"
        "    print('   State=IDLE+DRAIN ThreadsPerCore=1')\n"
        f"    print('   Reason=' + {reason!r} + ' [admin@2026-12-07T10:00:00]')\n")
    script.chmod(0o755)


@pytest.mark.parametrize("reason", REASONS)
def test_another_operators_drain_reason_is_printed_as_a_line(
        node: dict[str, Path], monkeypatch: pytest.MonkeyPatch, reason: str) -> None:  # noqa: F811
    _scontrol(node["tmp"] / "bin", reason)
    # the stand-in scontrol, in the health check's own view only: a PATH set in os.environ
    # would reach the children that the suite's background jobs start meanwhile
    stand_in = str(node["tmp"] / "bin" / "scontrol")
    monkeypatch.setattr(slurm, "scontrol", lambda: stand_in)
    parsed = build_parser().parse_args([
        "health", "--slurm", "--node", "gpu01", "--kernel-log", str(node["log"]),
        "--sysfs-pci", str(node["sysfs"]), "--state", str(node["state"])])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        command.run(parsed, nvml=gpus(node["tmp"]))
    shown = [line for line in out.getvalue().split("\n") if line.startswith("slurm:")]
    assert shown, out.getvalue()
    assert all(line.isprintable() for line in out.getvalue().split("\n")), out.getvalue()


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_a_state_that_is_not_a_file_is_one_line_not_a_hang(tmp_path: Path, kind: str) -> None:
    """A FIFO at the state's name blocked the check for ever (opened without O_NONBLOCK)."""
    state = tmp_path / "state" / "health.json"
    state.parent.mkdir(mode=0o700)
    if kind == "fifo":
        os.mkfifo(state)
    else:
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(state))
    log = klog.write(tmp_path / "kern.log", klog.noise(1.0, 3))
    done = subprocess.run([sys.executable, "-m", "workloads", "health", "--state", str(state),
                           "--kernel-log", str(log)], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr[-400:]
    assert kind != "fifo" or "is not a regular file" in done.stderr
