"""hypervisor.yml in check mode on this machine, reading a fake sysfs tree.

Check mode renders every file the role would write (the diff holds the new
content) and runs every decision, while changing nothing: exactly what an
operator sees with `ansible-playbook hypervisor.yml --check --diff` before the
first real run. The real run (update-grub, initramfs, reboot, vfio-pci binding)
is tests/hypervisor/test_vm_hypervisor.py.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from tests.hypervisor.fake_sysfs import (
    CONSUMER_GPU,
    P100,
    SEED_HOST,
    FakeFunction,
    build_sysfs,
    without_iommu,
)
from tests.hypervisor.play import Play, localhost_inventory, run_hypervisor_play

HOST = "localhost"
GRUB_TASK = "Add the IOMMU arguments to GRUB_CMDLINE_LINUX"
FILES_TASK = "Write the vfio-pci, blacklist and module-load files"
INITRAMFS_TASK = "Load vfio-pci first in the initramfs (initramfs-tools)"
# Everything the role may write on a Debian host.
WRITTEN = [
    "/etc/default/grub.d/90-gpu-passthrough.cfg", "/etc/modprobe.d/vfio.conf",
    "/etc/modprobe.d/blacklist-gpu-passthrough.conf", "/etc/modules-load.d/vfio.conf",
    "/etc/initramfs-tools/modules",
]

pytestmark = pytest.mark.skipif(
    not Path("/etc/debian_version").exists() or os.geteuid() != 0,
    reason="check mode against this machine needs a Debian host and root (apt, /etc)",
)


def _fingerprint() -> dict[str, str | None]:
    return {path: hashlib.sha256(Path(path).read_bytes()).hexdigest()
            if Path(path).exists() else None for path in WRITTEN}


def check(tmp_path: Path, functions: list[FakeFunction], **variables: Any) -> Play:
    """Run the play in --check --diff against `functions`; assert the host stayed untouched."""
    root = build_sysfs(tmp_path / "sys", functions)
    cmdline = tmp_path / "cmdline"
    cmdline.write_text("BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet\n")
    settings = {
        "gpu_passthrough_sysfs_root": str(root),
        "gpu_passthrough_cmdline_file": str(cmdline),
        # Never reboot the machine running the tests, check mode or not.
        "gpu_passthrough_reboot": False,
        **variables,
    }
    before = _fingerprint()
    play = run_hypervisor_play(localhost_inventory(tmp_path / "inventory.yml"), settings,
                               tmp_path, "--check", "--diff")
    assert _fingerprint() == before, "check mode changed files on the host"
    return play


def test_renders_kernel_arguments_and_vfio_config_for_the_seed_host(tmp_path: Path) -> None:
    play = check(tmp_path, SEED_HOST, gpu_passthrough_iommu="intel")
    assert play.returncode == 0, play.output[-4000:]

    grub = play.rendered(HOST, GRUB_TASK)
    expected = ('GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }'
                'intel_iommu=on iommu=pt"')
    assert expected in grub.splitlines()

    vfio = play.rendered(HOST, FILES_TASK, "/etc/modprobe.d/vfio.conf").splitlines()
    assert f"options vfio-pci ids={P100} disable_vga=1" in vfio
    for module in ("nouveau", "nvidia", "nvidia_drm", "snd_hda_intel"):
        assert f"softdep {module} pre: vfio-pci" in vfio

    blacklist = play.rendered(HOST, FILES_TASK,
                              "/etc/modprobe.d/blacklist-gpu-passthrough.conf").splitlines()
    assert {"blacklist nouveau", "blacklist nvidia", "options nouveau modeset=0"} <= set(blacklist)
    assert "blacklist snd_hda_intel" not in blacklist, "the host's own sound must keep working"

    modules = play.rendered(HOST, FILES_TASK, "/etc/modules-load.d/vfio.conf").split()
    assert modules[-3:] == ["vfio", "vfio_iommu_type1", "vfio_pci"]
    initramfs = play.rendered(HOST, INITRAMFS_TASK)
    assert "vfio\nvfio_iommu_type1\nvfio_pci\n" in initramfs

    groups = play.result(HOST, "Report the IOMMU groups of those devices")["msg"]
    assert "IOMMU group 20: 0000:18:00.0  [10de:15f8]  3D controller  -> vfio-pci" in groups
    assert "IOMMU group 20: 0000:17:00.0  [8086:2030]  PCI bridge  (stays on the host)" in groups
    # Handlers were notified; check mode only says they would run.
    assert play.result(HOST, "Update the boot loader")["skipped"]
    assert play.result(HOST, "Rebuild the initramfs")["skipped"]


def test_amd_host_with_a_multi_function_card_and_extra_arguments(tmp_path: Path) -> None:
    play = check(tmp_path, CONSUMER_GPU, gpu_passthrough_iommu="amd",
                 gpu_passthrough_kernel_args=["video=efifb:off"],
                 gpu_passthrough_disable_vga=False)
    assert play.returncode == 0, play.output[-4000:]
    assert "amd_iommu=on iommu=pt video=efifb:off\"" in play.rendered(HOST, GRUB_TASK)
    vfio = play.rendered(HOST, FILES_TASK, "/etc/modprobe.d/vfio.conf").splitlines()
    assert "options vfio-pci ids=10de:10f8,10de:1ad8,10de:1ad9,10de:1e87" in vfio


def test_auto_vendor_and_explicit_ids_of_absent_cards(tmp_path: Path) -> None:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    expected = "intel_iommu=on" if "GenuineIntel" in cpuinfo else "amd_iommu=on"
    play = check(tmp_path, SEED_HOST, gpu_passthrough_ids=["10de:20b5"])
    assert play.returncode == 0, play.output[-4000:]
    assert f"{expected} iommu=pt\"" in play.rendered(HOST, GRUB_TASK)
    vfio = play.rendered(HOST, FILES_TASK, "/etc/modprobe.d/vfio.conf").splitlines()
    assert "options vfio-pci ids=10de:20b5 disable_vga=1" in vfio
    warning = play.result(HOST, "Warn about requested IDs that no present device has")["msg"]
    assert "10de:20b5" in warning


def test_without_iommu_the_group_check_waits_for_the_reboot(tmp_path: Path) -> None:
    play = check(tmp_path, without_iommu(SEED_HOST), gpu_passthrough_iommu="intel")
    assert play.returncode == 0, play.output[-4000:]
    message = play.result(HOST, "Say why the IOMMU groups cannot be checked yet")["msg"]
    assert "checked after the reboot" in message


def _changes_attempted(play: Play) -> list[str]:
    return [name for name, result in play.tasks(HOST)
            if name in (GRUB_TASK, FILES_TASK, INITRAMFS_TASK) and not result.get("skipped")]


def test_a_gpu_sharing_its_group_with_a_nic_stops_before_any_change(tmp_path: Path) -> None:
    shared = [*SEED_HOST[:4], FakeFunction("0000:18:00.0", P100, "030200", "20", "nvidia"),
              FakeFunction("0000:19:00.0", "8086:1563", "020000", "20", "ixgbe")]
    play = check(tmp_path, shared)
    assert play.returncode != 0
    task, message = play.failure(HOST)
    assert task == "Fail if a GPU shares its IOMMU group with a device that stays on the host"
    assert "0000:19:00.0 (8086:1563, Ethernet controller, driver ixgbe) in group 20" in message
    assert "Fix:" in message
    assert _changes_attempted(play) == []


def test_no_gpu_at_all_is_a_clear_failure(tmp_path: Path) -> None:
    play = check(tmp_path, [f for f in SEED_HOST if f.pci_id != P100])
    assert play.returncode != 0
    task, message = play.failure(HOST)
    assert task == "Fail if there is nothing to pass through"
    assert "lspci -nn" in message and "gpu_passthrough_ids" in message
    assert _changes_attempted(play) == []


def test_a_bad_address_names_the_value(tmp_path: Path) -> None:
    play = check(tmp_path, SEED_HOST, gpu_passthrough_addresses=["18:00"])
    assert play.returncode != 0
    _, message = play.failure(HOST)
    assert "'18:00' is not a PCI address" in message


def test_the_argument_spec_rejects_an_unknown_iommu_choice(tmp_path: Path) -> None:
    play = check(tmp_path, SEED_HOST, gpu_passthrough_iommu="arm")
    assert play.returncode != 0
    _, message = play.failure(HOST)
    assert "gpu_passthrough_iommu" in message and "intel" in message


def test_builtin_vfio_pci_gets_the_ids_on_the_kernel_command_line(tmp_path: Path) -> None:
    """Ubuntu's kernels build vfio-pci in: modprobe.d options never reach it there."""
    builtin = tmp_path / "modules.builtin"
    builtin.write_text("kernel/drivers/vfio/vfio.ko\nkernel/drivers/vfio/pci/vfio-pci-core.ko\n"
                       "kernel/drivers/vfio/pci/vfio-pci.ko\n")
    play = check(tmp_path, SEED_HOST, gpu_passthrough_iommu="intel",
                 gpu_passthrough_modules_builtin_file=str(builtin))
    assert play.returncode == 0, play.output[-4000:]
    assert ('intel_iommu=on iommu=pt vfio-pci.ids=10de:15f8 vfio-pci.disable_vga=1"'
            in play.rendered(HOST, GRUB_TASK))

