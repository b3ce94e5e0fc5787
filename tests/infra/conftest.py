"""testinfra suite: is this host what ansible/site.yml promises?

Runs unchanged against the CI container, a VM or a real GPU host:

    pytest tests/infra --hosts=docker://tfhost-target
    pytest tests/infra --hosts=ssh://gpu1 \
        --tfhost-vars ansible/inventory/group_vars/gpu_hosts/vars.yml

What the host should look like comes from the same variables the play used:
every role's defaults, overridden by the --tfhost-vars files in order. Tests
marked `gpu` need a GPU on the *target* host and skip when nvidia-smi finds
none there. Set TFHOST_NGC_API_KEY (an environment variable, never an
argument: arguments show in process lists) to also check the NGC login and
that the key appears in none of the host's logs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "ansible" / "roles"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tfhost-vars",
        action="append",
        default=[],
        metavar="FILE",
        help="YAML file of Ansible variables the host was provisioned with (repeatable)",
    )


def _role_defaults() -> dict[str, Any]:
    """Plain (untemplated) defaults of every role: what the play uses when nothing overrides."""
    merged: dict[str, Any] = {}
    for path in sorted(ROLES.glob("*/defaults/main.yml")):
        for key, value in (yaml.safe_load(path.read_text()) or {}).items():
            if not (isinstance(value, str) and "{{" in value):
                merged[key] = value
    return merged


@pytest.fixture(scope="session")
def tfvars(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The variables the host was provisioned with."""
    merged = _role_defaults()
    for name in request.config.getoption("tfhost_vars"):
        merged.update(yaml.safe_load(Path(name).read_text()) or {})
    return merged


@pytest.fixture(scope="session")
def ngc_api_key() -> str:
    """The key the play used, from the environment; tests that need it skip without it."""
    key = os.environ.get("TFHOST_NGC_API_KEY", "")
    if not key:
        pytest.skip("TFHOST_NGC_API_KEY is not set: the NGC login checks need the key")
    return key


@pytest.fixture
def gpu_count(host: Any) -> int:
    """GPUs nvidia-smi lists on the target (0 on a GPU-less VM or container)."""
    result = host.run("nvidia-smi -L")
    return len([line for line in result.stdout.splitlines() if line.startswith("GPU ")])


@pytest.fixture(autouse=True)
def _skip_gpu_tests_without_gpu(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("gpu") is None:
        return
    if request.getfixturevalue("gpu_count") == 0:
        pytest.skip("no NVIDIA GPU on the target host (nvidia-smi: No devices were found)")


@pytest.fixture
def debian_family(host: Any) -> None:
    """Skip apt/dpkg checks on the RHEL family."""
    if host.system_info.distribution not in ("debian", "ubuntu"):
        pytest.skip(f"apt-specific check; the target runs {host.system_info.distribution}")
