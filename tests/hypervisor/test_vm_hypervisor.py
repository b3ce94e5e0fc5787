"""hypervisor.yml for real, in a VM that has an IOMMU and a GPU-shaped device.

The guest is the project's box booted by scripts/vm.sh with QEMU's emulated
Intel VT-d (intel-iommu) and, in slot 00:05, a two-function device shaped like
a GPU: a VGA controller (1234:1111) in function 0 and an HD-audio controller
(8086:293e) in function 1, sharing one IOMMU group as a card and its HDMI audio
do. The role finds the "GPU" by vendor, takes the audio function along, writes
the GRUB drop-in and vfio files, runs update-grub and update-initramfs, reboots
the guest and then checks the running kernel: the real sequence of a
hypervisor, with the real kernel, boot loader and sysfs. Only the CPU
vendor is forced (gpu_passthrough_iommu: intel), because the emulated IOMMU is
Intel's whatever CPU runs the test; `auto` is covered in test_check_mode.py.

The packages step is off here: QEMU and libvirt with their dependencies are
~370 packages, over ten minutes of dpkg under software emulation; the package
list itself is resolved by apt in test_check_mode.py.

It is also CI's check of the box under scripts/vm.sh: the first boot (read
before anything runs), and QEMU's user-mode network with restrict=on, where
ssh to 127.0.0.1:PORT is the only way in and the guest reaches nothing on the
host. site.yml in a guest is tests/vm/test_vagrant_up.py (Vagrant's own path).
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.hypervisor.play import Play, run_hypervisor_play
from tests.support.background import BackgroundJobs, JobContext, background_job
from tests.vm.box_fixture import require_box
from tests.vm.emulation import SKIP_REASON, emulated_guests_skipped
from tests.vm.machine import Machine, booted, stop_vm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800),
              pytest.mark.skipif(emulated_guests_skipped(), reason=SKIP_REASON)]

HOST = "tfhost-vm"
GPU, AUDIO = "0000:00:05.0", "0000:00:05.1"
GPU_SHAPED_DEVICE = [
    "--qemu-arg", "-device", "--qemu-arg", "VGA,bus=pcie.0,addr=0x5.0x0,multifunction=on",
    "--qemu-arg", "-device", "--qemu-arg", "ich9-intel-hda,bus=pcie.0,addr=0x5.0x1",
]
SETTINGS = {
    "gpu_passthrough_vendors": ["1234"],
    "gpu_passthrough_iommu": "intel",
    "gpu_passthrough_install_packages": False,
}


@dataclass(frozen=True)
class Baseline:
    """The guest as it came up from the box, read before the role ran on it."""

    cmdline: str
    gpu_driver: str
    root_uid: str
    hostname: str
    system_state: str
    failed_units: str
    machine_id: str
    ssh_keys: list[str]


def _baseline(machine: Machine) -> Baseline:
    state = machine.run("systemctl is-system-running --wait", check=False).stdout.strip()
    return Baseline(
        cmdline=machine.run("cat /proc/cmdline").stdout,
        gpu_driver=_driver(machine, GPU),
        root_uid=machine.run("sudo -n id -u").stdout.strip(),
        hostname=machine.run("hostname").stdout.strip(),
        system_state=state,
        failed_units=machine.run("systemctl --failed", check=False).stdout,
        machine_id=machine.run("cat /etc/machine-id").stdout.strip(),
        ssh_keys=machine.run("ls /etc/ssh/").stdout.split(),
    )


@dataclass(frozen=True)
class Runs:
    machine: Machine
    baseline: Baseline
    first: Play
    second: Play
    boot_id_before: str


def _boot_id(machine: Machine) -> str:
    return machine.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()


def _driver(machine: Machine, address: str) -> str:
    return machine.run(f"basename \"$(readlink /sys/bus/pci/devices/{address}/driver)\"",
                       check=False).stdout.strip()


@background_job(__file__, name="hypervisor-vm")
def boot_and_run_twice(job: JobContext) -> Runs:
    """Boot the box with an IOMMU and the GPU-shaped device, run hypervisor.yml twice.

    A background job (tests/support/background.py): it starts after collection
    and runs beside the other tests; the fixture below collects its result.
    """
    box = require_box()
    state = job.workdir / "state"
    job.on_cancel(lambda: stop_vm(state))
    machine = job.stack.enter_context(booted(box, state, "--iommu", *GPU_SHAPED_DEVICE))
    baseline = _baseline(machine)
    inventory = machine.inventory(job.workdir / "inventory.yml", [], group="gpu_hypervisors")
    before = _boot_id(machine)
    first = run_hypervisor_play(inventory, SETTINGS, job.workdir, timeout=1200)
    second = run_hypervisor_play(inventory, SETTINGS, job.workdir, timeout=600) \
        if first.returncode == 0 else first
    return Runs(machine, baseline, first, second, before)


@pytest.fixture(scope="module")
def runs(background_jobs: BackgroundJobs) -> Iterator[Runs]:
    with background_jobs.held("hypervisor-vm") as runs:  # the guest stops with this module
        yield runs


def _changed(play: Play) -> list[str]:
    return [name for name, result in play.tasks(HOST) if result.get("changed")]


def test_box_boots_with_its_own_identity_and_passwordless_sudo(runs: Runs) -> None:
    boot = runs.baseline
    assert boot.root_uid == "0"
    assert boot.hostname == "tfhost-vm"
    assert boot.system_state == "running", boot.failed_units
    assert len(boot.machine_id) == 32
    assert "ssh_host_ed25519_key" in boot.ssh_keys
    assert "Linux version" in runs.machine.console(), "the serial console log is empty"


def _listening_sockets(pid: int) -> list[str]:
    lines = subprocess.run(["ss", "-Hltnup"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return [line.split()[4] for line in lines if f"pid={pid}," in line]


def test_guest_is_reachable_only_on_loopback(runs: Runs) -> None:
    machine = runs.machine
    pid = int((machine.state / "qemu.pid").read_text())
    assert _listening_sockets(pid) == [f"127.0.0.1:{machine.ssh_port}"]
    assert "restrict=on" in (machine.state / "qemu.cmdline").read_text()
    # QEMU's user network would map 10.0.2.2 to the host's loopback; restrict=on
    # must refuse it even for a port that is really listening there.
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        probe = machine.run(f"timeout 5 bash -c 'echo > /dev/tcp/10.0.2.2/{port}'", check=False)
    assert probe.returncode != 0


def test_before_the_role_nothing_is_bound_to_vfio(runs: Runs) -> None:
    """The baseline the first run changed, read by the job before the role ran."""
    assert "intel_iommu=on" not in runs.baseline.cmdline
    assert runs.baseline.gpu_driver != "vfio-pci"


def test_first_run_reboots_into_the_iommu_with_vfio_bound(runs: Runs) -> None:
    play = runs.first
    assert play.returncode == 0, play.output[-5000:]
    changed = _changed(play)
    for task in ("Add the IOMMU arguments to GRUB_CMDLINE_LINUX", "Update the boot loader",
                 "Rebuild the initramfs", "Reboot to turn on the IOMMU and vfio-pci"):
        assert task in changed, changed
    assert _boot_id(runs.machine) != runs.boot_id_before, "the guest did not reboot"

    cmdline = runs.machine.run("cat /proc/cmdline").stdout.split()
    assert {"intel_iommu=on", "iommu=pt"} <= set(cmdline)
    assert _driver(runs.machine, GPU) == "vfio-pci"
    assert _driver(runs.machine, AUDIO) == "vfio-pci"


def test_the_play_reported_the_group_and_verified_the_binding(runs: Runs) -> None:
    play = runs.first
    assert play.returncode == 0, play.output[-5000:]
    report = play.result(HOST, "Report the devices to pass through")["msg"]
    assert report[0] == "To vfio-pci (ids=1234:1111,8086:293e):"
    groups = play.result(HOST, "Report the IOMMU groups of those devices")["msg"]
    assert len({line.split(":")[0] for line in groups}) == 1, groups  # one group for both
    assert all(line.endswith("-> vfio-pci") for line in groups), groups
    checks = play.result(HOST, "Check that vfio-pci drives every passed-through function")
    assert [item["msg"] for item in checks["results"]] == [
        f"{GPU} (1234:1111): vfio-pci", f"{AUDIO} (8086:293e): vfio-pci"]


def test_initramfs_loads_vfio_pci_with_the_ids(runs: Runs) -> None:
    assert runs.first.returncode == 0, runs.first.output[-5000:]
    listing = runs.machine.run("lsinitramfs /boot/initrd.img-$(uname -r)").stdout
    assert "etc/modprobe.d/vfio.conf" in listing
    assert "vfio-pci.ko" in listing
    grub = runs.machine.run("grep -c 'intel_iommu=on iommu=pt' /boot/grub/grub.cfg").stdout
    assert int(grub) >= 1


def test_second_run_changes_nothing_and_verifies_again(runs: Runs) -> None:
    assert runs.second.returncode == 0, runs.second.output[-5000:]
    assert _changed(runs.second) == []
    assert runs.second.result(HOST, "Check that the IOMMU is on")["msg"].startswith("IOMMU on:")


def test_a_device_sharing_its_real_group_is_refused(runs: Runs) -> None:
    """00:1f.2 (SATA) shares its group with the LPC bridge and SMBus of the ICH9 chipset."""
    assert runs.first.returncode == 0, runs.first.output[-5000:]
    machine = runs.machine
    inventory = machine.state.parent / "inventory.yml"
    play = run_hypervisor_play(
        inventory, {**SETTINGS, "gpu_passthrough_addresses": ["0000:00:1f.2"],
                    "gpu_passthrough_include_functions": False},
        machine.state.parent, timeout=600)
    assert play.returncode != 0
    task, message = play.failure(HOST)
    assert task == "Fail if a GPU shares its IOMMU group with a device that stays on the host"
    assert "0000:00:1f.0" in message and "0000:00:1f.3" in message
    assert _changed(play) == []
