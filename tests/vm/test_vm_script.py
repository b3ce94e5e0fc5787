"""scripts/vm.sh refuses bad input with one line, before it builds or boots anything."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.vm.machine import VM


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["start", "--memory", "lots"], "--memory must be MiB >= 512, got 'lots'"),
        (["start", "--memory", "256"], "--memory must be MiB >= 512, got '256'"),
        (["start", "--cpus", "0"], "--cpus must be a positive integer, got '0'"),
        (["start", "--ssh-port", "ssh"], "--ssh-port must be a port number, got 'ssh'"),
        (["start", "--accel", "hvf"], "--accel must be auto, kvm or tcg, got 'hvf'"),
        (["start", "--disk", "/nonexistent.qcow2", "--key", "/dev/null"],
         "disk /nonexistent.qcow2 does not exist; build one: scripts/build-box.sh"),
        (["start", "--colour", "blue"], "unknown option --colour for start"),
        (["ssh"], "no VM state in"),
        (["reboot"], "unknown command 'reboot'"),
    ],
)
def test_bad_input_fails_with_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    state = ["--state", str(tmp_path / "state")] if args[0] != "reboot" else []
    result = subprocess.run([str(VM), *args, *state], capture_output=True, text=True,
                            timeout=60, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("vm.sh: ") and message in lines[0], lines
    assert not (tmp_path / "state").exists(), "nothing may be created on bad input"
