"""Suite-wide pytest configuration.

``tests/infra`` is the testinfra suite that checks a provisioned host; it needs
``--hosts=...`` and is run by the Ansible and VM tests (or by hand against a real
GPU host), so it is not collected in a plain ``pytest`` run.
"""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support import child_stdin

pytest_plugins = ["tests.support.docker_engine", "tests.support.background",
                  "tests.support.browser"]

INFRA = Path(__file__).parent / "infra"

# Property-based tests run the same bounded, derandomised examples on every run: a failure
# in CI is reproduced by running the test again, and the suite's time does not drift.
settings.register_profile(
    "suite",
    derandomize=True,
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


def pytest_configure(config: pytest.Config) -> None:
    """Give the suite Ctrl-C back when its caller ignored it; give each child its own stdin.

    A shell without job control starts background commands with SIGINT ignored
    (POSIX), and an ignored signal stays ignored across fork and exec: then pytest
    cannot be interrupted, and every child the Ctrl-C tests signal (tests/host,
    tests/sweep) ignores the SIGINT they send. Python's own handler in this process
    makes the children start with SIGINT at its default, as in a terminal.

    tests/support/child_stdin.py says why no child shares the suite's stdin.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    child_stdin.install()


def blocking_stdio() -> list[int]:
    """Put stdin, stdout and stderr back in blocking mode; returns the fds that were not.

    Children inherit this process's stdio, and the open file behind each is
    shared: one child that sets O_NONBLOCK on it (seen in a clean clone on a
    fresh machine, while the Debian base images were built) leaves it so for
    every later child, and ansible-core then refuses to start ("Ansible requires
    blocking IO on stdin/stdout/stderr. Non-blocking file handles detected").
    """
    repaired = []
    for fd in (0, 1, 2):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        except OSError:
            continue
        if flags & os.O_NONBLOCK:
            fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
            repaired.append(fd)
    return repaired


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test starts with blocking stdio, whatever an earlier test's children did."""
    blocking_stdio()


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Tests marked `measures` run at the very end, after the `run_last` modules.

    Why: they compare figures measured on this machine (the fleet test's throttled host
    against its healthy siblings). While background set-ups (converges, TCG guests) run
    beside them, a healthy stand-in can measure at half its speed; after the `run_last`
    modules, whose fixtures wait for those set-ups, the machine runs nothing else. A
    wrapper, so that this order is applied after every plugin's own (the background
    plugin moves the `run_last` modules to the end).
    """
    yield
    items[:] = sorted(items, key=lambda item: item.get_closest_marker("measures") is not None)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    hosts = config.getoption("hosts", default=None)
    if not hosts and INFRA in (collection_path, *collection_path.parents):
        return True
    return None
