"""DCGM: on hosts with GPUs the host engine runs; GPU-less hosts get none of it.

Mirrors the dcgm role's decision (dcgm_enabled: auto installs it where
nvidia-smi lists GPUs), so it holds on the CI container, the HGX stand-in and
a real GPU host alike.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.infra.helpers import installed_version


def _gpus(host: Any) -> int:
    result = host.run("nvidia-smi -L")
    return len([line for line in result.stdout.splitlines() if line.startswith("GPU ")])


def _expected(host: Any, tfvars: dict[str, Any]) -> bool:
    mode = tfvars.get("dcgm_enabled", "auto")
    return mode == "always" or (mode == "auto" and _gpus(host) > 0)


def _cuda_major(host: Any, tfvars: dict[str, Any]) -> str:
    """The role's choice: dcgm_cuda_major, or for auto the major nvidia-smi reports."""
    major = str(tfvars.get("dcgm_cuda_major", "auto"))
    if major != "auto":
        return major
    found = re.search(r"CUDA Version: *([0-9]+)\.", host.run("nvidia-smi").stdout)
    assert found, "nvidia-smi reports no CUDA version"
    return found.group(1)


def test_dcgm_only_where_there_are_gpus(host: Any, tfvars: dict[str, Any]) -> None:
    if _expected(host, tfvars):
        packages = tfvars.get("dcgm_packages") or [
            f"datacenter-gpu-manager-4-cuda{_cuda_major(host, tfvars)}"]
        versions = {name: installed_version(host, name) for name in packages}
        assert all(versions.values()), f"DCGM packages missing: {versions}"
        service = host.service("nvidia-dcgm")
        assert service.is_enabled and service.is_running
    else:
        packages = ["datacenter-gpu-manager-4-core", "datacenter-gpu-manager-4-cuda12",
                    "datacenter-gpu-manager-4-cuda13", *tfvars.get("dcgm_packages", [])]
        versions = {name: installed_version(host, name) for name in packages}
        assert not any(versions.values()), f"DCGM installed on a host without GPUs: {versions}"


def _exporter_enabled(host: Any, tfvars: dict[str, Any]) -> None:
    if not (tfvars.get("dcgm_exporter") and _expected(host, tfvars)):
        pytest.skip("dcgm_exporter is off (the default) or this host gets no DCGM")


def test_the_exporter_runs_and_serves_metrics_where_enabled(host: Any,
                                                           tfvars: dict[str, Any]) -> None:
    """dcgm_exporter: true -> the dcgm-exporter container, on the NVIDIA runtime, answers
    on the address and port it was given."""
    _exporter_enabled(host, tfvars)
    inspect = host.run("docker inspect --format '{{.State.Running}} {{.HostConfig.Runtime}} "
                       "{{.Config.Image}}' dcgm-exporter")
    assert inspect.rc == 0, "no dcgm-exporter container"
    assert inspect.stdout.split() == ["true", "nvidia", tfvars["dcgm_exporter_image"]]
    address = tfvars.get("dcgm_exporter_address", "127.0.0.1")
    address = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    url = f"http://{f'[{address}]' if ':' in address else address}:{tfvars['dcgm_exporter_port']}"
    metrics = host.run(f"python3 -c \"import urllib.request; print(urllib.request.urlopen("
                       f"'{url}/metrics', timeout=10).read().decode())\"")
    assert metrics.rc == 0, metrics.stderr
    assert re.search(r"(?m)^DCGM_FI_", metrics.stdout), metrics.stdout[:500]


def test_the_exporter_has_the_least_privilege(host: Any, tfvars: dict[str, Any]) -> None:
    """No capability but CAP_SYS_ADMIN for profiling metrics (as root, which Docker needs to
    hand one over), otherwise an unprivileged user; no-new-privileges; a read-only root."""
    _exporter_enabled(host, tfvars)
    found = host.run("docker inspect dcgm-exporter")
    assert found.rc == 0, "no dcgm-exporter container"
    (container,) = json.loads(found.stdout)
    config = container["HostConfig"]
    profiling = bool(tfvars.get("dcgm_exporter_profiling", False))
    assert config["CapDrop"] == ["ALL"]
    assert [name.removeprefix("CAP_") for name in config["CapAdd"] or []] == (
        ["SYS_ADMIN"] if profiling else [])
    assert config["Privileged"] is False
    assert config["ReadonlyRootfs"] is True
    assert "no-new-privileges" in config["SecurityOpt"]
    assert container["Config"]["User"] == (
        "0:0" if profiling else tfvars.get("dcgm_exporter_user", "65534:65534"))
