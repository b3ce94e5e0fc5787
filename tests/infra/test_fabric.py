"""NVSwitch systems: Fabric Manager of the driver's branch, held, running, fabric initialised.

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


def _fm_package(host: Any, tfvars: dict[str, Any]) -> str:
    if host.system_info.distribution in ("rocky", "redhat", "rhel"):
        return "nvidia-fabric-manager"
    return f"nvidia-fabricmanager-{tfvars['nvidia_driver_branch']}"


def test_fabric_manager_only_where_there_are_nvswitches(host: Any, tfvars: dict[str, Any]) -> None:
    version = installed_version(host, _fm_package(host, tfvars))
    if _fabric_expected(host, tfvars):
        assert version.startswith(f"{tfvars['nvidia_driver_branch']}."), \
            f"Fabric Manager is {version or 'not installed'}"
    else:
        assert version == "", f"Fabric Manager {version} installed on a host without NVSwitches"
        assert not host.package("nvlsm").is_installed


def test_fabric_manager_matches_the_driver_and_is_held(host: Any, tfvars: dict[str, Any]) -> None:
    if not _fabric_expected(host, tfvars):
        pytest.skip("no NVSwitch on this host")
    if host.system_info.distribution not in ("debian", "ubuntu"):
        pytest.skip("the dnf module stream and versionlock tie it to the driver")
    package = _fm_package(host, tfvars)
    driver = installed_version(host, "nvidia-smi") or installed_version(
        host, f"nvidia-utils-{tfvars['nvidia_driver_branch']}")
    assert installed_version(host, package) == driver
    if tfvars.get("nvidia_driver_hold", True):
        assert package in held_packages(host)


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
