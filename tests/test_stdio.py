"""No child of the suite shares its stdin; stdout and stderr are blocking at each test's start.

tests/support/child_stdin.py and tests/conftest.py say why.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import blocking_stdio
from tests.support import child_stdin

TESTS = Path(__file__).parent
SET_NONBLOCK = ("import fcntl, os, sys; fd = int(sys.argv[1]); "
                "fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)")
REPORT_STDIN = ("import fcntl, os; "
                "print(bool(fcntl.fcntl(0, fcntl.F_GETFL) & os.O_NONBLOCK), "
                "os.readlink('/proc/self/fd/0'))")


def _nonblocking(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK)


@contextmanager
def _fd_replaced(fd: int, path: str, mode: int) -> Iterator[None]:
    """`fd` points at a fresh open of `path` for the block, then at what it was."""
    saved = os.dup(fd)
    replacement = os.open(path, mode)
    os.dup2(replacement, fd)
    os.close(replacement)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def test_the_suite_gives_children_a_private_stdin() -> None:
    assert child_stdin.installed()


def test_a_child_that_makes_its_stdin_non_blocking_changes_only_its_own() -> None:
    """What broke the clean clone: a child's O_NONBLOCK showed in every later child."""
    with _fd_replaced(0, os.devnull, os.O_RDONLY):
        subprocess.run([sys.executable, "-c", SET_NONBLOCK, "0"], check=True)
        later = subprocess.run([sys.executable, "-c", REPORT_STDIN], check=True,
                               capture_output=True, text=True).stdout.split()
        assert not _nonblocking(0)
    assert later == ["False", "/dev/null"]


def test_a_non_blocking_stdin_in_the_suite_no_longer_breaks_an_ansible_run() -> None:
    """ansible-core checks its stdio when it starts; its stdin is now its own /dev/null."""
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
    with _fd_replaced(0, os.devnull, os.O_RDONLY):
        fcntl.fcntl(0, fcntl.F_SETFL, fcntl.fcntl(0, fcntl.F_GETFL) | os.O_NONBLOCK)
        run = subprocess.run([ansible, "localhost", "-c", "local", "-m", "ansible.builtin.ping"],
                             capture_output=True, text=True, timeout=300, check=False,
                             env={**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false"})
    assert "requires blocking IO" not in run.stdout + run.stderr
    assert run.returncode == 0, run.stdout + run.stderr
    assert '"ping": "pong"' in run.stdout


def test_a_caller_that_passes_stdin_keeps_it() -> None:
    echoed = subprocess.run(["cat"], input="kept\n", capture_output=True, text=True, check=True)
    assert echoed.stdout == "kept\n"


def test_no_test_starts_a_child_outside_subprocess() -> None:
    """Only `subprocess` (and asyncio, which uses it) gets the private stdin."""
    other_ways = re.compile(r"\bos\.(system|fork|forkpty|spawn\w*|posix_spawnp?|exec\w+|popen)\(")
    found = [f"{path.relative_to(TESTS)}:{number}"
             for path in TESTS.rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if other_ways.search(line) and path.name != Path(__file__).name]
    assert found == []


def test_a_child_left_stdout_non_blocking_and_it_is_repaired() -> None:
    """stdout and stderr stay shared (children's output must reach the log): repaired per test."""
    with tempfile.NamedTemporaryFile() as log, _fd_replaced(1, log.name, os.O_WRONLY | os.O_APPEND):
        subprocess.run([sys.executable, "-c", SET_NONBLOCK, "1"], check=True, stdout=None)
        assert _nonblocking(1), "the child's flag must show here: the open file is shared"
        assert 1 in blocking_stdio()
        assert not _nonblocking(1)
        assert blocking_stdio() == []

