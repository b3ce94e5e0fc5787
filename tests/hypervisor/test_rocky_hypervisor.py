"""hypervisor.yml on the Rocky 9 stand-in: dnf, grubby, dracut and libvirt's modular daemons.

RHEL 9 deprecates the monolithic libvirtd: each driver has its own daemon
(virtqemud, virtnodedevd, ...), started by its sockets, and virtproxyd answers
on libvirtd's old socket path. The role must enable those, and stop a
libvirtd that a host set up the EL8 way still runs (both would serve the same
socket path, and a client would find its VMs in one daemon and not the
other). The stand-in (tests/ansible/rocky.py) installs Rocky 9.5's package
split from stub rpms whose unit files follow libvirt's
(tests/fixtures/rpmrepo/hypervisor.py): the modular services conflict with
libvirtd.service in systemd as on Rocky. The stubs' scriptlets apply no
systemd presets (Rocky's enable the modular sockets at install): the role
enables what it needs itself, so either way the end state is the same.

The machine is the seed's four-P100 host as a fake sysfs tree in the
container. The sequence is an operator's: --check on the fresh host; the real
run (grubby adds the IOMMU arguments to every boot entry, dracut is told to
load vfio-pci first, a reboot is announced); the "reboot" (the kernel command
line read from the boot entry, the GPUs on vfio-pci); a re-run that verifies
and changes nothing; then a host where someone enabled libvirtd by hand,
which the role switches back. The Debian family's real run is
test_vm_hypervisor.py (a VM with an IOMMU).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.ansible.platforms import ROCKY9
from tests.ansible.playbook import write_inventory
from tests.ansible.rocky import prepare_rocky, rocky_image
from tests.ansible.target import TargetHost, start_target
from tests.fixtures.rpmrepo import build_rpm_repos, serve_directory
from tests.hypervisor.fake_sysfs import SEED_HOST, FakeFunction, build_sysfs
from tests.hypervisor.play import Play, run_hypervisor_play
from tests.support.background import set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

GPUS = [function.address for function in SEED_HOST if function.pci_id.startswith("10de:")]
KERNEL = "5.14.0-503.14.1.el9_5.x86_64"
BOOT_ENTRY = f"/boot/loader/entries/0123456789abcdef0123456789abcdef-{KERNEL}.conf"
INSTALLED_OPTIONS = ("root=/dev/mapper/rl-root ro crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M"
                     " resume=/dev/mapper/rl-swap rd.lvm.lv=rl/root rd.lvm.lv=rl/swap")
# A Rocky 9 install's entry for its kernel (kernel-install writes it).
ENTRY = f"""\
title Rocky Linux ({KERNEL}) 9.5 (Blue Onyx)
version {KERNEL}
linux /vmlinuz-{KERNEL}
initrd /initramfs-{KERNEL}.img $tuned_initrd
options {INSTALLED_OPTIONS}
grub_users $grub_users
grub_arg --unrestricted
grub_class rocky
"""
# The CPU the container shares with the CI machine picks the IOMMU argument (iommu: auto).
EXPECTED_ARGS = ["intel_iommu=on" if "GenuineIntel" in Path("/proc/cpuinfo").read_text()
                 else "amd_iommu=on", "iommu=pt"]
MODULAR = ["virtqemud", "virtnetworkd", "virtnodedevd", "virtnwfilterd", "virtsecretd",
           "virtstoraged", "virtinterfaced", "virtproxyd"]
LEGACY = ["libvirtd.service", "libvirtd.socket", "libvirtd-ro.socket", "libvirtd-admin.socket"]
SYSFS_BEFORE, SYSFS_AFTER = "/srv/hw/sys-before", "/srv/hw/sys-after"
CMDLINE = "/srv/hw/cmdline"
USER = "vmadmin"


@dataclass
class RockyHypervisor:
    """What each run did, and the host's state read after it."""

    host: TargetHost
    check: Play
    check_left: dict[str, bool]
    first: Play
    first_state: dict[str, str]
    entry_after_first: str
    dracut_log: str
    second: Play
    legacy_enabled_by_hand: dict[str, str]
    third: Play
    third_state: dict[str, str]


def _after_reboot(functions: list[FakeFunction]) -> list[FakeFunction]:
    """The same machine once vfio-pci has claimed the GPUs at boot."""
    return [FakeFunction(f.address, f.pci_id, f.pci_class, f.group,
                         "vfio-pci" if f.address in GPUS else f.driver) for f in functions]


def _install_tree(host: TargetHost, local: Path, remote: str) -> None:
    host.exec("mkdir", "-p", str(Path(remote).parent))
    subprocess.run(["docker", "cp", f"{local}/.", f"{host.name}:{remote}"], check=True,
                   capture_output=True, timeout=120)


def _all_units() -> list[str]:
    return [f"{daemon}{suffix}" for daemon in MODULAR
            for suffix in (".service", ".socket", "-ro.socket", "-admin.socket")] + LEGACY


def _settings(sysfs: str) -> dict[str, Any]:
    return {"gpu_passthrough_sysfs_root": sysfs, "gpu_passthrough_cmdline_file": CMDLINE,
            # A container cannot reboot; the test "reboots" it between runs.
            "gpu_passthrough_reboot": False, "gpu_passthrough_libvirt_users": [USER]}


@contextmanager
def _rocky_hypervisor_runs(workdir: Path) -> Iterator[RockyHypervisor]:
    repos = build_rpm_repos(workdir / "rpmrepos")
    before = build_sysfs(workdir / "sys-before", SEED_HOST)
    after = build_sysfs(workdir / "sys-after", _after_reboot(SEED_HOST))
    image = rocky_image()
    with serve_directory(repos.root, workdir / "http.log") as base_url:
        host = start_target(image, f"tfhost-hyp-rocky-{os.getpid()}", ROCKY9)
        try:
            prepare_rocky(host, repos, base_url)
            # Every Rocky install has grubby, dracut and a boot entry for its kernel.
            host.exec("dnf", "-q", "-y", "install", "grubby", "dracut")
            host.exec("mkdir", "-p", "/boot/loader/entries")
            host.exec("tee", BOOT_ENTRY, stdin=ENTRY)
            host.exec("useradd", "--create-home", USER)
            _install_tree(host, before, SYSFS_BEFORE)
            _install_tree(host, after, SYSFS_AFTER)
            host.exec("tee", CMDLINE, stdin=f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{KERNEL} "
                                             f"{INSTALLED_OPTIONS}\n")
            inventory = write_inventory(workdir / "inventory.yml", host.name,
                                        group="gpu_hypervisors")

            def play(name: str, sysfs: str, *options: str) -> Play:
                run_dir = workdir / name
                run_dir.mkdir()
                return run_hypervisor_play(inventory, _settings(sysfs), run_dir, *options)

            check = play("check", SYSFS_BEFORE, "--check", "--diff")
            check_left = {
                path: host.exec("test", "-e", path, check=False).returncode != 0
                for path in ("/etc/dracut.conf.d/90-vfio.conf", "/etc/modprobe.d/vfio.conf",
                             "/usr/sbin/virtqemud", "/var/log/dracut-stub.log")}
            check_left["boot entry"] = host.read(BOOT_ENTRY) == ENTRY
            first = play("first", SYSFS_BEFORE)
            first_state = host.unit_states(_all_units())
            entry = host.read(BOOT_ENTRY)
            dracut_log = host.exec("cat", "/var/log/dracut-stub.log", check=False).stdout
            # The reboot: the kernel boots with the entry's options, vfio-pci claims the GPUs.
            options = next(line.split(" ", 1)[1] for line in entry.splitlines()
                           if line.startswith("options "))
            host.exec("tee", CMDLINE, stdin=f"BOOT_IMAGE=(hd0,gpt2)/vmlinuz-{KERNEL} {options}\n")
            second = play("second", SYSFS_AFTER)
            # Someone follows an EL8 guide: libvirtd and its sockets, by hand.
            host.exec("systemctl", "stop", *[f"{daemon}{suffix}" for daemon in MODULAR
                                             for suffix in (".socket", "-ro.socket",
                                                            "-admin.socket", ".service")])
            host.exec("systemctl", "enable", "--now", *LEGACY)
            by_hand = host.unit_states([*LEGACY, "virtqemud.service", "virtproxyd.socket"])
            third = play("third", SYSFS_AFTER)
            third_state = host.unit_states(_all_units())
            yield RockyHypervisor(host, check, check_left, first, first_state, entry, dracut_log,
                                  second, by_hand, third, third_state)
        finally:
            host.remove()


# The slow set-up runs in the background from the session's start; this module's tests
# run after every other test (`run_last`). tests/support/background.py.
rocky_hypervisor = pytest.fixture(scope="module", name="rocky_hypervisor")(
    set_up_in_background(__file__, "rocky-hypervisor", _rocky_hypervisor_runs, ensure_engine))


def _recap(play: Play) -> dict[str, int]:
    return next(iter(play.results.get("stats", {}).values()), {})


def test_check_mode_on_the_fresh_host_passes_and_changes_nothing(
        rocky_hypervisor: RockyHypervisor) -> None:
    play = rocky_hypervisor.check
    assert play.returncode == 0, play.output[-4000:]
    assert rocky_hypervisor.check_left == dict.fromkeys(rocky_hypervisor.check_left, True)
    dracut = play.rendered(rocky_hypervisor.host.name,
                           "Load vfio-pci first in the initramfs (dracut)")
    assert 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "' in dracut
    users = play.result(rocky_hypervisor.host.name, "Say which users would join the libvirt group")
    assert f"adds {USER} to it" in users["msg"]


def test_the_real_run_sets_up_grubby_dracut_and_vfio(rocky_hypervisor: RockyHypervisor) -> None:
    play, host = rocky_hypervisor.first, rocky_hypervisor.host
    assert play.returncode == 0, play.output[-4000:]
    options = next(line for line in rocky_hypervisor.entry_after_first.splitlines()
                   if line.startswith("options "))
    assert options == f"options {INSTALLED_OPTIONS} {' '.join(EXPECTED_ARGS)}", \
        rocky_hypervisor.entry_after_first
    # One initramfs rebuild, for every kernel, after the drop-in was written.
    assert rocky_hypervisor.dracut_log.splitlines() == [
        "dracut --force --regenerate-all force_drivers=[vfio vfio_iommu_type1 vfio_pci]"]
    vfio = host.read("/etc/modprobe.d/vfio.conf").splitlines()
    assert "options vfio-pci ids=10de:15f8 disable_vga=1" in vfio
    message = play.result(host.name, "Say that a reboot is still needed")["msg"]
    assert f"reboot it to apply {' '.join(EXPECTED_ARGS)}" in message
    assert "libvirt" in host.exec("id", "-nG", USER).stdout.split()


def test_the_real_run_starts_the_modular_daemons_not_libvirtd(
        rocky_hypervisor: RockyHypervisor) -> None:
    state = rocky_hypervisor.first_state
    for daemon in MODULAR:
        assert state[f"{daemon}.service"].startswith("enabled/"), state
        for socket in (f"{daemon}.socket", f"{daemon}-ro.socket", f"{daemon}-admin.socket"):
            assert state[socket] == "enabled/active", (socket, state)
    for unit in LEGACY:
        assert state[unit] == "disabled/inactive", (unit, state)
    sockets = rocky_hypervisor.host.exec("ls", "/run/libvirt").stdout.split()
    assert {"virtqemud-sock", "virtnodedevd-sock", "libvirt-sock"} <= set(sockets)


def test_after_the_reboot_the_play_verifies_and_changes_nothing(
        rocky_hypervisor: RockyHypervisor) -> None:
    play, host = rocky_hypervisor.second, rocky_hypervisor.host.name
    assert play.returncode == 0, play.output[-4000:]
    assert _recap(play).get("changed") == 0, play.output[-4000:]
    running = play.result(host, "Check that the running kernel has the IOMMU arguments")
    assert " ".join(EXPECTED_ARGS) in running["msg"]
    bound = play.result(host, "Check that vfio-pci drives every passed-through function")
    assert sorted(item["item"]["address"] for item in bound["results"]) == sorted(GPUS)


def test_a_hand_enabled_libvirtd_is_switched_to_the_modular_daemons(
        rocky_hypervisor: RockyHypervisor) -> None:
    by_hand = rocky_hypervisor.legacy_enabled_by_hand
    assert by_hand["libvirtd.socket"] == "enabled/active", by_hand  # the scene was set
    play = rocky_hypervisor.third
    assert play.returncode == 0, play.output[-4000:]
    stopped = play.result(rocky_hypervisor.host.name, "Stop and disable the monolithic libvirtd")
    assert stopped["cmd"][:3] == ["systemctl", "disable", "--now"], stopped
    assert {"libvirtd.service", "libvirtd.socket"} <= set(stopped["cmd"]), stopped
    state = rocky_hypervisor.third_state
    for unit in LEGACY:
        assert state[unit] == "disabled/inactive", (unit, state)
    for daemon in MODULAR:
        assert state[f"{daemon}.socket"] == "enabled/active", (daemon, state)
