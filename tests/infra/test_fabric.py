"""NVSwitch systems: Fabric Manager and NSCQ at the driver's build, held, the fabric initialised.

On a host without NVSwitches (every CI container, a PCIe server) the checks
assert the opposite: no Fabric Manager, no NVLSM. Whether the host has
NVSwitches is read the way the role reads it: NVIDIA (0x10de) PCI functions
of class 0x0680 under nvidia_driver_pci_devices_path.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra.helpers import held_packages, installed_version

FABRIC = re.compile(r"^\s+Fabric\s*\n\s+State\s+:\s+(.*?)\s*\n\s+Status\s+:\s+(.*?)\s*$",
                    re.MULTILINE)


def _nvswitches(host: Any, tfvars: dict[str, Any]) -> int:
    path = tfvars.get("nvidia_driver_pci_devices_path", "/sys/bus/pci/devices")
    script = (f"for d in {path}/*; do [ \"$(cat $d/vendor)\" = 0x10de ] && "
              f"case \"$(cat $d/class)\" in 0x0680*) echo $d;; esac; done; true")
    return len(host.check_output(script).split())


def _fabric_expected(host: Any, tfvars: dict[str, Any]) -> bool:
    mode = tfvars.get("nvidia_driver_fabricmanager", "auto")
    return mode == "always" or (mode == "auto" and _nvswitches(host, tfvars) > 0)


def _rpm_based(host: Any) -> bool:
    return host.system_info.distribution in ("rocky", "redhat", "rhel")


def _fm_package(host: Any, tfvars: dict[str, Any]) -> str:
    """Fabric Manager's name: by branch on apt before 580 (nvidia-fabricmanager-570), dnf's
    nvidia-fabric-manager before 580, nvidia-fabricmanager on both from 580."""
    branch = str(tfvars["nvidia_driver_branch"])
    if int(branch) >= 580:
        return "nvidia-fabricmanager"
    return "nvidia-fabric-manager" if _rpm_based(host) else f"nvidia-fabricmanager-{branch}"


def _nscq_package(tfvars: dict[str, Any]) -> str:
    """NSCQ (libnvidia-nscq), named like Fabric Manager: by branch before 580."""
    branch = str(tfvars["nvidia_driver_branch"])
    return "libnvidia-nscq" if int(branch) >= 580 else f"libnvidia-nscq-{branch}"


def _driver_version(host: Any, tfvars: dict[str, Any]) -> str:
    """The installed driver's upstream version, read from the package carrying nvidia-smi."""
    for name in ("nvidia-smi", "nvidia-driver-cuda", "nvidia-utils",
                 f"nvidia-utils-{tfvars['nvidia_driver_branch']}"):
        version = installed_version(host, name)
        if version:
            return str(version.split(":")[-1].split("-")[0])
    return ""


def test_fabric_manager_only_where_there_are_nvswitches(host: Any, tfvars: dict[str, Any]) -> None:
    version = installed_version(host, _fm_package(host, tfvars))
    if _fabric_expected(host, tfvars):
        assert version.startswith(f"{tfvars['nvidia_driver_branch']}."), \
            f"Fabric Manager is {version or 'not installed'}"
    else:
        assert version == "", f"Fabric Manager {version} installed on a host without NVSwitches"
        assert not host.package("nvlsm").is_installed


def test_fabric_manager_and_nscq_match_the_driver_and_are_held(
        host: Any, tfvars: dict[str, Any]) -> None:
    """Both at the driver's build: Fabric Manager refuses another, and NSCQ (which DCGM reads
    the NVSwitches through) must be the driver's; held with it (apt) or locked (dnf)."""
    if not _fabric_expected(host, tfvars):
        pytest.skip("no NVSwitch on this host")
    driver = _driver_version(host, tfvars)
    assert driver, "no driver package installed"
    packages = [_fm_package(host, tfvars), _nscq_package(tfvars)]
    for package in packages:
        version = installed_version(host, package)
        upstream = version.split(":")[-1].split("-")[0]
        assert upstream == driver, f"{package} {version}, driver {driver}"
    if not tfvars.get("nvidia_driver_hold", True):
        return
    if _rpm_based(host):
        locked = host.check_output("dnf -q versionlock list")
        for package in packages:
            assert f"{package}-0:{driver}-" in locked, locked
        return
    assert set(packages) <= held_packages(host)


def test_fabric_manager_runs_and_the_fabric_is_initialised(host: Any,
                                                          tfvars: dict[str, Any]) -> None:
    if not _fabric_expected(host, tfvars):
        pytest.skip("no NVSwitch on this host")
    service = host.service("nvidia-fabricmanager")
    assert service.is_enabled
    assert service.is_running
    query = host.run("nvidia-smi -q")
    if "No devices were found" in query.stdout:
        pytest.skip("nvidia-smi finds no GPU: the fabric state cannot be read")
    states = ["/".join(match) for match in FABRIC.findall(query.stdout)]
    assert states, "nvidia-smi -q shows no Fabric section"
    assert set(states) == {"Completed/Success"}, states
