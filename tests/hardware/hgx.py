"""A fake machine's hardware given to a target container: its PCI tree and the GPUs nvidia-smi sees.

Why shared: the HGX stand-ins of apt (test_hgx_converge.py) and dnf
(test_hgx_rocky.py) must be the same machine, set up the same way, so that a
difference between their runs is the package manager's and not the fixture's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.ansible.playbook import REPO
from tests.ansible.target import TargetHost, docker
from tests.hardware.machines import Machine

FAKE_PCI = "/srv/fake-pci"  # where the tree lies inside the container


def give_machine(host: TargetHost, machine: Machine, workdir: Path) -> str:
    """Copy machine's PCI tree into host and tell the nvidia-smi stub of its GPUs and that tree.

    The stub reads the tree to report the NVLink fabric as the real tool does ("In Progress"
    until Fabric Manager runs on an NVSwitch machine). Returns the devices directory inside
    the container, for nvidia_driver_pci_devices_path.
    """
    devices = machine.build(workdir / f"{machine.name}-sysfs")
    docker("cp", str(devices.parent.parent.parent), f"{host.name}:{FAKE_PCI}")
    inside = f"{FAKE_PCI}/bus/pci/devices"
    host.exec("mkdir", "-p", "/var/lib/nvidia-stub")
    host.exec("tee", "/var/lib/nvidia-stub/gpus", stdin=machine.smi_gpus())
    host.exec("tee", "/var/lib/nvidia-stub/pci-devices", stdin=f"{inside}\n")
    return inside


def run_infra(host: TargetHost, vars_files: list[Path], *modules: str
              ) -> subprocess.CompletedProcess[str]:
    """tests/infra's `modules` against the container, with the play's variables, as an
    operator runs them against a real host (`--hosts`, `--tfhost-vars`)."""
    options = [option for path in vars_files for option in ("--tfhost-vars", str(path))]
    return subprocess.run(
        [sys.executable, "-m", "pytest", *modules, f"--hosts=docker://{host.name}", *options,
         "-p", "no:cacheprovider", "-q", "-rs"],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
