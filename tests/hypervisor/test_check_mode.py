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
from collections.abc import Callable
from dataclasses import dataclass
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
from tests.support.background import AFTER_RUN_LAST, BackgroundJobs, JobContext, background_job

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


@dataclass(frozen=True)
class Checked:
    """One --check --diff run, and whether the host's files were as before it."""

    play: Play
    untouched: bool


def check(workdir: Path, functions: list[FakeFunction], **variables: Any) -> Checked:
    """Run the play in --check --diff against `functions`; note whether the host was untouched."""
    workdir.mkdir(parents=True, exist_ok=True)
    root = build_sysfs(workdir / "sys", functions)
    cmdline = workdir / "cmdline"
    cmdline.write_text("BOOT_IMAGE=/boot/vmlinuz root=/dev/sda1 ro quiet\n")
    settings = {
        "gpu_passthrough_sysfs_root": str(root),
        "gpu_passthrough_cmdline_file": str(cmdline),
        # Never reboot the machine running the tests, check mode or not.
        "gpu_passthrough_reboot": False,
        **variables,
    }
    before = _fingerprint()
    play = run_hypervisor_play(localhost_inventory(workdir / "inventory.yml"), settings,
                               workdir, "--check", "--diff")
    return Checked(play, _fingerprint() == before)


def _with_builtin_vfio_pci(workdir: Path) -> Checked:
    """Ubuntu's kernels build vfio-pci in (its modules.builtin says so)."""
    workdir.mkdir(parents=True, exist_ok=True)
    builtin = workdir / "modules.builtin"
    builtin.write_text("kernel/drivers/vfio/vfio.ko\nkernel/drivers/vfio/pci/vfio-pci-core.ko\n"
                       "kernel/drivers/vfio/pci/vfio-pci.ko\n")
    return check(workdir, SEED_HOST, gpu_passthrough_iommu="intel",
                 gpu_passthrough_modules_builtin_file=str(builtin))


SHARED_GROUP = [*SEED_HOST[:4], FakeFunction("0000:18:00.0", P100, "030200", "20", "nvidia"),
                FakeFunction("0000:19:00.0", "8086:1563", "020000", "20", "ixgbe")]
# Each host state and settings the tests below read, by name.
SCENARIOS: dict[str, Callable[[Path], Checked]] = {
    "seed-host": lambda workdir: check(workdir, SEED_HOST, gpu_passthrough_iommu="intel"),
    "amd-multi-function": lambda workdir: check(
        workdir, CONSUMER_GPU, gpu_passthrough_iommu="amd",
        gpu_passthrough_kernel_args=["video=efifb:off"], gpu_passthrough_disable_vga=False),
    "absent-ids": lambda workdir: check(workdir, SEED_HOST, gpu_passthrough_ids=["10de:20b5"]),
    "without-iommu": lambda workdir: check(workdir, without_iommu(SEED_HOST),
                                           gpu_passthrough_iommu="intel"),
    "shared-group": lambda workdir: check(workdir, SHARED_GROUP),
    "no-gpu": lambda workdir: check(workdir, [f for f in SEED_HOST if f.pci_id != P100]),
    "bad-address": lambda workdir: check(workdir, SEED_HOST,
                                         gpu_passthrough_addresses=["18:00"]),
    "unknown-iommu": lambda workdir: check(workdir, SEED_HOST, gpu_passthrough_iommu="arm"),
    "builtin-vfio-pci": _with_builtin_vfio_pci,
}


@background_job(__file__, name="hypervisor-check-mode", run_last=AFTER_RUN_LAST)
def _check_every_scenario(job: JobContext) -> dict[str, Checked]:
    """The nine check-mode plays, one after another in a background job queued behind the
    converges; the tests read them after those modules (tests/support/background.py)."""
    return {name: scenario(job.workdir / name) for name, scenario in SCENARIOS.items()}


@pytest.fixture(scope="module")
def checked(background_jobs: BackgroundJobs) -> dict[str, Checked]:
    with background_jobs.held("hypervisor-check-mode") as value:
        return value


def _play(checked: dict[str, Checked], scenario: str) -> Play:
    """The scenario's run, after checking that check mode left the host's files alone."""
    assert checked[scenario].untouched, "check mode changed files on the host"
    return checked[scenario].play


def test_renders_kernel_arguments_and_vfio_config_for_the_seed_host(
        checked: dict[str, Checked]) -> None:
    play = _play(checked, "seed-host")
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


def test_amd_host_with_a_multi_function_card_and_extra_arguments(
        checked: dict[str, Checked]) -> None:
    play = _play(checked, "amd-multi-function")
    assert play.returncode == 0, play.output[-4000:]
    assert "amd_iommu=on iommu=pt video=efifb:off\"" in play.rendered(HOST, GRUB_TASK)
    vfio = play.rendered(HOST, FILES_TASK, "/etc/modprobe.d/vfio.conf").splitlines()
    assert "options vfio-pci ids=10de:10f8,10de:1ad8,10de:1ad9,10de:1e87" in vfio


def test_auto_vendor_and_explicit_ids_of_absent_cards(checked: dict[str, Checked]) -> None:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    expected = "intel_iommu=on" if "GenuineIntel" in cpuinfo else "amd_iommu=on"
    play = _play(checked, "absent-ids")
    assert play.returncode == 0, play.output[-4000:]
    assert f"{expected} iommu=pt\"" in play.rendered(HOST, GRUB_TASK)
    vfio = play.rendered(HOST, FILES_TASK, "/etc/modprobe.d/vfio.conf").splitlines()
    assert "options vfio-pci ids=10de:20b5 disable_vga=1" in vfio
    warning = play.result(HOST, "Warn about requested IDs that no present device has")["msg"]
    assert "10de:20b5" in warning


def test_without_iommu_the_group_check_waits_for_the_reboot(
        checked: dict[str, Checked]) -> None:
    play = _play(checked, "without-iommu")
    assert play.returncode == 0, play.output[-4000:]
    message = play.result(HOST, "Say why the IOMMU groups cannot be checked yet")["msg"]
    assert "checked after the reboot" in message


def _changes_attempted(play: Play) -> list[str]:
    return [name for name, result in play.tasks(HOST)
            if name in (GRUB_TASK, FILES_TASK, INITRAMFS_TASK) and not result.get("skipped")]


def test_a_gpu_sharing_its_group_with_a_nic_stops_before_any_change(
        checked: dict[str, Checked]) -> None:
    play = _play(checked, "shared-group")
    assert play.returncode != 0
    task, message = play.failure(HOST)
    assert task == "Fail if a GPU shares its IOMMU group with a device that stays on the host"
    assert "0000:19:00.0 (8086:1563, Ethernet controller, driver ixgbe) in group 20" in message
    assert "Fix:" in message
    assert _changes_attempted(play) == []


def test_no_gpu_at_all_is_a_clear_failure(checked: dict[str, Checked]) -> None:
    play = _play(checked, "no-gpu")
    assert play.returncode != 0
    task, message = play.failure(HOST)
    assert task == "Fail if there is nothing to pass through"
    assert "lspci -nn" in message and "gpu_passthrough_ids" in message
    assert _changes_attempted(play) == []


def test_a_bad_address_names_the_value(checked: dict[str, Checked]) -> None:
    play = _play(checked, "bad-address")
    assert play.returncode != 0
    _, message = play.failure(HOST)
    assert "'18:00' is not a PCI address" in message


def test_the_argument_spec_rejects_an_unknown_iommu_choice(checked: dict[str, Checked]) -> None:
    play = _play(checked, "unknown-iommu")
    assert play.returncode != 0
    _, message = play.failure(HOST)
    assert "gpu_passthrough_iommu" in message and "intel" in message


def test_builtin_vfio_pci_gets_the_ids_on_the_kernel_command_line(
        checked: dict[str, Checked]) -> None:
    """Ubuntu's kernels build vfio-pci in: modprobe.d options never reach it there."""
    play = _play(checked, "builtin-vfio-pci")
    assert play.returncode == 0, play.output[-4000:]
    assert ('intel_iommu=on iommu=pt vfio-pci.ids=10de:15f8 vfio-pci.disable_vga=1"'
            in play.rendered(HOST, GRUB_TASK))

