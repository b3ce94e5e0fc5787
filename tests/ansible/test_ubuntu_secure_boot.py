"""Secure Boot on Ubuntu: Canonical's signed modules for the kernel flavour in use, no DKMS.

The Ubuntu 24.04 stand-in (tests/ansible/platforms.py) as a host with Secure
Boot on (a `mokutil` that says so) and the HWE kernel: its kernel is the one
the container runs, installed as `linux-image-<release>` with
`linux-image-generic-hwe-24.04` depending on it, as on a 24.04 server that
follows the HWE kernels. A signed stand-in of Ubuntu's archive (on 127.0.0.1)
holds Canonical's signed-module packages for that kernel and for the GA kernel
(6.8.0-51-generic, meta `generic`), with their real names; the module packages
carry the kernel's version, as linux-restricted-modules' do.

Before the fix the role took the flavour from the kernel release's suffix
(`generic` on a real HWE host: the GA kernel's modules) and pinned every
package to the driver's version (`=580.*`), which no linux-modules package has.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.lab import Lab
from tests.ansible.platforms import UBUNTU2404
from tests.ansible.playbook import PlaybookRun, run_playbook, write_inventory
from tests.ansible.target import TargetHost, start_target, target_image
from tests.fixtures.aptrepo import build_stub_repos, serve_directory
from tests.fixtures.aptrepo.catalog import ubuntu_signed_module_packages
from tests.fixtures.aptrepo.debs import PackageFile, StubPackage
from tests.fixtures.aptrepo.ubuntu_archive import build_signed_archive
from tests.support.background import AFTER_RUN_LAST, set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

RUNNING = os.uname().release  # the container shares the CI machine's kernel
GA_KERNEL = "6.8.0-51-generic"
ARCHIVE = Path("ubuntu-archive")
MOKUTIL = "#!/bin/sh\n# mokutil where Secure Boot is on\necho 'SecureBoot enabled'\n"


def _kernel(release: str, version: str) -> StubPackage:
    return StubPackage(f"linux-image-{release}", version, f"Signed kernel image {release}",
                       section="kernel", source="linux-signed",
                       files={f"/boot/config-{release}": PackageFile("# stub kernel config\n")})


def _archive() -> list[StubPackage]:
    """The part of Ubuntu's archive the Secure Boot path uses, for two kernels."""
    running_version = "6.18.44.100+1"
    packages = [
        _kernel(RUNNING, running_version),
        StubPackage("linux-image-generic-hwe-24.04", running_version,
                    "Generic Linux kernel image (HWE)", section="kernel", source="linux-meta",
                    depends=(f"linux-image-{RUNNING}",),
                    files={"/usr/share/doc/linux-image-generic-hwe-24.04/README.stub":
                           PackageFile("stub\n")}),
        _kernel(GA_KERNEL, "6.8.0-51.52"),
        StubPackage("linux-image-generic", "6.8.0-51.52", "Generic Linux kernel image",
                    section="kernel", source="linux-meta", depends=(f"linux-image-{GA_KERNEL}",),
                    files={"/usr/share/doc/linux-image-generic/README.stub":
                           PackageFile("stub\n")}),
        *ubuntu_signed_module_packages("580", RUNNING, kernel_version=running_version,
                                       metas=("generic-hwe-24.04",)),
        *ubuntu_signed_module_packages("580", GA_KERNEL, kernel_version="6.8.0-51.52+1",
                                       metas=("generic",)),
    ]
    return list({(package.name, package.version): package for package in packages}.values())


@dataclass
class SecureBootRun:
    host: TargetHost
    first: PlaybookRun
    installed: dict[str, str]  # package -> "version want"
    second: PlaybookRun


def _installed(host: TargetHost) -> dict[str, str]:
    listing = host.exec("dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Want} "
                        "${db:Status-Status}\\n", check=False).stdout
    return {fields[0]: f"{fields[1]} {fields[2]}" for fields in
            (line.split() for line in listing.splitlines()) if fields[-1] == "installed"}


@contextmanager
def _secure_boot_runs(workdir: Path) -> Iterator[SecureBootRun]:
    """The host set up as above, its two runs of the driver role; the host goes on leaving."""
    repos = build_stub_repos(workdir / "repos")
    build_signed_archive(repos.root / ARCHIVE, _archive())
    with serve_directory(repos.root, workdir / "http.log") as base_url:
        lab = Lab(workdir, repos, base_url, "127.0.0.1:9", target_image())
        host = start_target(lab.target_image, f"tfhost-secureboot-{os.getpid()}", UBUNTU2404)
        try:
            host.exec("sh", "-c", "mkdir -p /etc/apt/keyrings && cat >/etc/apt/keyrings/ubuntu.asc",
                      stdin=(repos.root / ARCHIVE / "key.asc").read_text())
            host.exec("sh", "-c", "echo 'deb [signed-by=/etc/apt/keyrings/ubuntu.asc] "
                                  f"{base_url}/{ARCHIVE}/ /' >/etc/apt/sources.list.d/ubuntu.list")
            host.exec("apt-get", "update", "-qq")
            host.exec("apt-get", "install", "-qq", "-y", "linux-image-generic-hwe-24.04")
            host.exec("tee", "/usr/bin/mokutil", stdin=MOKUTIL)
            host.exec("chmod", "0755", "/usr/bin/mokutil")
            inventory = write_inventory(workdir / "inventory.yml", host.name)
            first = run_playbook(inventory, [lab.vars_file], workdir / "first.log",
                                 "--tags", "nvidia_driver")
            installed = _installed(host)
            second = run_playbook(inventory, [lab.vars_file], workdir / "second.log",
                                  "--tags", "nvidia_driver")
            yield SecureBootRun(host, first, installed, second)
        finally:
            host.remove()


# A self-contained set-up (its own container and archive): a background job queued behind
# the converges, its tests after theirs (tests/support/background.py, AFTER_RUN_LAST).
secure_boot = pytest.fixture(scope="module", name="secure_boot")(set_up_in_background(
    __file__, "ubuntu-secure-boot", _secure_boot_runs, ensure_engine, run_last=AFTER_RUN_LAST))


def test_the_hwe_flavour_modules_and_the_kernels_own_are_installed(
        secure_boot: SecureBootRun) -> None:
    run = secure_boot.first
    assert run.returncode == 0, run.explain()
    installed = secure_boot.installed
    for name in ("linux-modules-nvidia-580-server-open-generic-hwe-24.04",
                 f"linux-modules-nvidia-580-server-open-{RUNNING}",
                 f"linux-objects-nvidia-580-server-open-{RUNNING}",
                 "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                 "nvidia-compute-utils-580-server"):
        assert name in installed, f"{name} missing: {sorted(installed)}"
    said = " ".join(run.output.split())
    # (The YAML callback doubles the apostrophe of "Canonical's": match after it.)
    assert (f"signed open modules for kernel {RUNNING}, following "
            "linux-image-generic-hwe-24.04 (no DKMS)") in said


def test_no_ga_kernel_modules_no_dkms_no_headers(secure_boot: SecureBootRun) -> None:
    installed = secure_boot.installed
    wrong = [name for name in installed if name.endswith(("-generic", GA_KERNEL))
             or name.startswith(("dkms", "nvidia-dkms-", "linux-headers-", "nvidia-kernel-source"))]
    assert wrong == [], wrong


def test_the_driver_userspace_is_held_and_the_kernel_versioned_modules_are_not(
        secure_boot: SecureBootRun) -> None:
    installed = secure_boot.installed
    assert installed["nvidia-utils-580-server"].split() == ["580.159.03-0ubuntu0.24.04.1", "hold"]
    module = installed["linux-modules-nvidia-580-server-open-generic-hwe-24.04"].split()
    assert module == ["6.18.44.100+1", "install"], module  # follows the kernel meta's upgrades


def test_secure_boot_rerun_changes_nothing(secure_boot: SecureBootRun) -> None:
    run = secure_boot.second
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()
