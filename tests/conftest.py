"""Suite-wide pytest configuration.

``tests/infra`` is the testinfra suite that checks a provisioned host; it needs
``--hosts=...`` and is run by the Ansible and VM tests (or by hand against a real
GPU host), so it is not collected in a plain ``pytest`` run.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

pytest_plugins = ["pytester", "tests.support.docker_engine", "tests.support.background"]

INFRA = Path(__file__).parent / "infra"


def pytest_configure(config: pytest.Config) -> None:
    """Give the suite Ctrl-C back when its caller ignored it.

    A shell without job control starts background commands with SIGINT ignored
    (POSIX), and an ignored signal stays ignored across fork and exec: then pytest
    cannot be interrupted, and every child the Ctrl-C tests signal (tests/host,
    tests/sweep) ignores the SIGINT they send. Python's own handler in this process
    makes the children start with SIGINT at its default, as in a terminal.
    """
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    hosts = config.getoption("hosts", default=None)
    if not hosts and INFRA in (collection_path, *collection_path.parents):
        return True
    return None
