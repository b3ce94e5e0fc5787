"""The suite's stdio is blocking at the start of every test (tests/conftest.py says why)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys

from tests.conftest import blocking_stdio


def _nonblocking(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)


def test_a_child_left_stdin_non_blocking_and_it_is_repaired() -> None:
    """A child sets O_NONBLOCK on the stdin it shares with us; the repair clears it."""
    with open(os.devnull, "rb") as devnull:
        saved = os.dup(0)
        os.dup2(devnull.fileno(), 0)
        try:
            subprocess.run([sys.executable, "-c",
                            "import fcntl, os; fcntl.fcntl(0, fcntl.F_SETFL, "
                            "fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)"], check=True)
            assert _nonblocking(0), "the child's flag must show here: the open file is shared"
            assert 0 in blocking_stdio()
            assert not _nonblocking(0)
            assert blocking_stdio() == []
        finally:
            os.dup2(saved, 0)
            os.close(saved)


def test_ansible_refuses_non_blocking_stdin_and_starts_after_the_repair() -> None:
    """What failed in the clean clone: ansible-core checks its stdio at start."""
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
    with open(os.devnull, "rb") as devnull:
        saved = os.dup(0)
        os.dup2(devnull.fileno(), 0)
        try:
            fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)
            refused = subprocess.run([ansible, "--version"], capture_output=True, text=True,
                                     timeout=120, check=False)
            blocking_stdio()
            started = subprocess.run([ansible, "--version"], capture_output=True, text=True,
                                     timeout=120, check=False)
        finally:
            os.dup2(saved, 0)
            os.close(saved)
    assert refused.returncode != 0
    assert "requires blocking IO" in refused.stdout + refused.stderr
    assert started.returncode == 0, started.stderr
