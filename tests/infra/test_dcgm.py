"""DCGM: on hosts with GPUs the host engine runs; GPU-less hosts get none of it.

Mirrors the dcgm role's decision (dcgm_enabled: auto installs it where
nvidia-smi lists GPUs), so it holds on the CI container, the HGX stand-in and
a real GPU host alike.
"""

from __future__ import annotations

from typing import Any

from tests.infra.helpers import installed_version


def _gpus(host: Any) -> int:
    result = host.run("nvidia-smi -L")
    return len([line for line in result.stdout.splitlines() if line.startswith("GPU ")])


def _expected(host: Any, tfvars: dict[str, Any]) -> bool:
    mode = tfvars.get("dcgm_enabled", "auto")
    return mode == "always" or (mode == "auto" and _gpus(host) > 0)


def test_dcgm_only_where_there_are_gpus(host: Any, tfvars: dict[str, Any]) -> None:
    packages = tfvars.get("dcgm_packages") or [
        f"datacenter-gpu-manager-4-cuda{tfvars.get('dcgm_cuda_major', '12')}"]
    versions = {name: installed_version(host, name) for name in packages}
    if _expected(host, tfvars):
        assert all(versions.values()), f"DCGM packages missing: {versions}"
        service = host.service("nvidia-dcgm")
        assert service.is_enabled and service.is_running
    else:
        assert not any(versions.values()), f"DCGM installed on a host without GPUs: {versions}"

