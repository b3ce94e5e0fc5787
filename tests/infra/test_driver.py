"""The NVIDIA driver: pinned branch, held packages, nouveau out, persistence daemon."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.helpers import held_packages, installed_version

DEBIAN_DRIVER_PACKAGES = ["nvidia-driver-cuda", "nvidia-smi", "nvidia-persistenced"]


def driver_packages(host: Any, tfvars: dict[str, Any]) -> list[str]:
    """The compute-only set the play installs for this distribution, branch and module flavour."""
    branch = str(tfvars["nvidia_driver_branch"])
    flavour = tfvars["nvidia_driver_kernel_modules"]
    # NVIDIA's Ubuntu packages carry the branch in their names up to 580, not from 590.
    named = "" if int(branch) >= 590 else f"-{branch}"
    if flavour == "auto":  # the role chose from the GPUs: whichever flavour is installed
        open_package = "nvidia-kernel-open-dkms"
        if host.system_info.distribution == "ubuntu":
            open_package = f"nvidia-dkms{named}-open"
        flavour = "open" if installed_version(host, open_package) else "proprietary"
    is_open = flavour == "open"
    if host.system_info.distribution == "ubuntu":
        suffix = "-open" if is_open else ""
        if not named:  # the driver installation guide's compute-only set, with the utilities
            return ["libnvidia-compute", f"nvidia-dkms{suffix}", "nvidia-utils",
                    "nvidia-compute-utils"]
        return [f"nvidia-headless-{branch}{suffix}", f"nvidia-dkms-{branch}{suffix}",
                f"nvidia-utils-{branch}", f"nvidia-compute-utils-{branch}"]
    modules = "nvidia-kernel-open-dkms" if is_open else "nvidia-kernel-dkms"
    return [*DEBIAN_DRIVER_PACKAGES, modules]


@pytest.mark.usefixtures("debian_family")
def test_driver_packages_are_on_the_pinned_branch(host: Any, tfvars: dict[str, Any]) -> None:
    branch = str(tfvars["nvidia_driver_branch"])
    for name in driver_packages(host, tfvars):
        version = installed_version(host, name)
        assert version.startswith(f"{branch}."), f"{name} is {version or 'not installed'}"


@pytest.mark.usefixtures("debian_family")
def test_driver_packages_are_held(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["nvidia_driver_hold"]:
        pytest.skip("nvidia_driver_hold is false")
    held = held_packages(host)
    missing = set(driver_packages(host, tfvars)) - held
    assert not missing, f"not held: {sorted(missing)} (held: {sorted(held)})"


def test_nouveau_is_blacklisted(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["nvidia_driver_blacklist_nouveau"]:
        pytest.skip("nvidia_driver_blacklist_nouveau is false")
    conf = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert conf.exists
    lines = conf.content_string.splitlines()
    assert "blacklist nouveau" in lines
    assert "options nouveau modeset=0" in lines


def test_nouveau_is_not_loaded(host: Any) -> None:
    modules = host.run("cat /proc/modules")
    if modules.rc != 0:
        pytest.skip("this kernel has no loadable modules (/proc/modules is absent)")
    assert "nouveau" not in [line.split()[0] for line in modules.stdout.splitlines()]


PERSISTENCE_FLAGS = ("--persistence-mode", "--no-persistence-mode")


def _persistenced_unit(host: Any) -> dict[str, str]:
    """The unit as systemd loaded it: the package's file with every drop-in applied."""
    shown = host.check_output("systemctl show nvidia-persistenced.service "
                              "--property=LoadState,WantedBy,RequiredBy,ExecStart")
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def test_persistence_daemon_starts_at_boot_with_persistence_on(
        host: Any, tfvars: dict[str, Any]) -> None:
    """Something the boot starts wants the daemon, and its command line keeps persistence on.

    `systemctl is-enabled` says "static" (exit 0) for Ubuntu's unit, which nothing
    starts at boot but a udev rule, and which passes --no-persistence-mode.
    """
    if not tfvars["nvidia_driver_persistenced"]:
        pytest.skip("nvidia_driver_persistenced is false")
    unit = _persistenced_unit(host)
    assert unit["LoadState"] == "loaded", unit
    assert "multi-user.target" in (unit["WantedBy"] + " " + unit["RequiredBy"]).split(), unit
    flags = [word for word in unit["ExecStart"].split() if word in PERSISTENCE_FLAGS]
    assert flags[-1:] != ["--no-persistence-mode"], unit["ExecStart"]  # the last one wins


def test_nvidia_smi_reports_no_gpu_cleanly_or_lists_gpus(host: Any, gpu_count: int) -> None:
    """Either GPUs, or exactly NVIDIA's no-device answer: anything else is a broken driver."""
    result = host.run("nvidia-smi -L")
    if gpu_count == 0:
        assert "No devices were found" in result.stdout, result.stdout + result.stderr
    else:
        assert result.rc == 0


@pytest.mark.gpu
def test_every_gpu_meets_the_minimum_compute_capability(host: Any, tfvars: dict[str, Any]) -> None:
    minimum = tuple(int(p) for p in str(tfvars["nvidia_driver_min_compute_capability"]).split("."))
    rows = host.check_output("nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader")
    for row in rows.splitlines():
        name, capability = (part.strip() for part in row.rsplit(",", 1))
        assert tuple(int(p) for p in capability.split(".")) >= minimum, f"{name}: {capability}"


@pytest.mark.gpu
def test_persistence_daemon_runs_with_gpus(host: Any) -> None:
    assert host.service("nvidia-persistenced").is_running


@pytest.mark.gpu
def test_every_gpu_has_persistence_mode_on(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["nvidia_driver_persistenced"]:
        pytest.skip("nvidia_driver_persistenced is false")
    rows = host.check_output("nvidia-smi --query-gpu=index,name,persistence_mode "
                             "--format=csv,noheader")
    off = [row for row in rows.splitlines() if not row.endswith(", Enabled")]
    assert not off, f"persistence mode is off on: {off}"
