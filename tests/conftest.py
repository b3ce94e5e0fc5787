"""Suite-wide pytest configuration.

``tests/infra`` is the testinfra suite that checks a provisioned host; it needs
``--hosts=...`` and is run by the Ansible and VM tests (or by hand against a real
GPU host), so it is not collected in a plain ``pytest`` run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester", "tests.support.docker_engine", "tests.support.background"]

INFRA = Path(__file__).parent / "infra"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    hosts = config.getoption("hosts", default=None)
    if not hosts and INFRA in (collection_path, *collection_path.parents):
        return True
    return None
