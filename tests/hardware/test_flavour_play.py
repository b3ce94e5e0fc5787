"""tasks/flavour.yml through Ansible: the decision is printed, a refusal stops the play first.

The role's own task file runs on this machine (connection local) against a
fake PCI tree, so the module, the generation table as include_vars loads it
and the messages are exercised exactly as on a host, in seconds.
"""

from __future__ import annotations

from pathlib import Path

from tests.hardware.localplay import run_role_tasks
from tests.hardware.machines import B200_HGX, P100


def _said(output: str, text: str) -> bool:
    return " ".join(text.split()) in " ".join(output.split())


def test_an_hgx_b200_gets_open_modules_fabric_manager_and_nvlsm(tmp_path: Path) -> None:
    run = run_role_tasks(tmp_path, "b200", "nvidia_driver", "flavour", {
        "nvidia_driver_pci_devices_path": str(B200_HGX.build(tmp_path / "sysfs"))})
    assert run.returncode == 0, run.explain()
    assert _said(run.output, "8 NVIDIA GPU(s) Blackwell (datacenter), 2 NVSwitch(es): open kernel "
                             "modules (nvidia_driver_kernel_modules: auto), branch 580, Fabric "
                             "Manager and NVLSM (NVLink 5).")


def test_open_modules_on_the_seed_p100s_are_refused_before_anything_else(tmp_path: Path) -> None:
    run = run_role_tasks(tmp_path, "p100", "nvidia_driver", "flavour", {
        "nvidia_driver_pci_devices_path": str(P100.build(tmp_path / "sysfs")),
        "nvidia_driver_kernel_modules": "open"})
    assert run.returncode != 0
    assert run.failed_task.endswith("Read the NVIDIA GPUs and NVSwitches from PCI and choose the "
                                    "kernel-module flavour")
    assert _said(run.output, "Refusing to install the NVIDIA driver: the open kernel modules "
                             "cannot drive 0000:18:00.0 (10de:15f8, Pascal (GP100))")
    assert run.recap["changed"] == 0
