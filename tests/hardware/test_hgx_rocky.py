"""The Rocky 9 stand-in "as" an HGX H100: Fabric Manager through dnf, at the driver's build.

The apt path of Fabric Manager runs end to end in test_hgx_converge.py; the dnf
path (tasks/fabricmanager-RedHat.yml: `nvidia-fabric-manager-<driver version>`
from the enabled nvidia-driver module stream, version-locked with the driver,
then started and checked by tasks/fabric-verify.yml) runs here for real: the
Rocky 9 stand-in (tests/ansible/rocky.py: Debian's dnf 4 and rpm behind Rocky's
identity) with the same HGX H100 as the
apt test (its PCI tree at nvidia_driver_pci_devices_path, the nvidia-smi stub
told of its eight GPUs; tests/hardware/hgx.py). Real: dnf resolving from the
signed stub repositories and their module streams, rpm's database, the
versionlock plugin, systemd starting the daemon. Stubs: the packages' payloads
(tests/fixtures/aptrepo/stubs: nvidia-smi reports the fabric "In Progress"
until the nv-fabricmanager stub of the driver's version runs, which refuses
another version). Only the driver role runs (--tags nvidia_driver); DCGM's
dnf path is converged by tests/ansible/test_platforms.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.ansible.lab import CONTAINER_VARS
from tests.ansible.platforms import ROCKY9
from tests.ansible.playbook import PlaybookRun, run_playbook, write_inventory
from tests.ansible.rocky import prepare_rocky, rocky_image, rocky_vars
from tests.ansible.target import TargetHost, start_target
from tests.ansible.timings import record_timing
from tests.fixtures.rpmrepo import build_rpm_repos, serve_directory
from tests.hardware.hgx import give_machine, run_infra
from tests.hardware.machines import H100_HGX
from tests.support.background import set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

# The compute-only set's package that carries nvidia-smi (vars/RedHat.yml): its
# version is the driver's, which Fabric Manager must have.
DRIVER_PACKAGE = "nvidia-driver-cuda"
# The dnf names from branch 580 (before: nvidia-fabric-manager, libnvidia-nscq-<branch>).
FABRIC_MANAGER = "nvidia-fabricmanager"
NSCQ = "libnvidia-nscq"
# A limit against a hung run, not a performance bound (see test_hgx_converge.py).
PLAY_TIMEOUT = 1200


@dataclass
class HgxRockyRun:
    host: TargetHost
    vars_file: Path
    first: PlaybookRun
    second: PlaybookRun


@contextmanager
def _hgx_rocky_runs(workdir: Path) -> Iterator[HgxRockyRun]:
    repos = build_rpm_repos(workdir / "rpmrepos")
    image = rocky_image()
    with serve_directory(repos.root, workdir / "rpmrepo-http.log") as base_url:
        host = start_target(image, f"tfhost-hw-hgx-rocky-{os.getpid()}", ROCKY9)
        try:
            prepare_rocky(host, repos, base_url)
            devices = give_machine(host, H100_HGX, workdir)
            vars_file = workdir / "hgx-rocky-vars.yml"
            vars_file.write_text(yaml.safe_dump({
                **CONTAINER_VARS, **rocky_vars(repos, base_url),
                "nvidia_driver_pci_devices_path": devices}))
            inventory = write_inventory(workdir / "hgx-rocky.inventory.yml", host.name)
            first, second = (run_playbook(inventory, [vars_file], workdir / f"hgx-rocky-{n}.log",
                                          "--tags", "nvidia_driver", timeout=PLAY_TIMEOUT)
                             for n in (1, 2))
            yield HgxRockyRun(host, vars_file, first, second)
        finally:
            host.remove()


# The slow set-up runs in the background from the session's start; this module's tests
# run after every other test (`run_last`). tests/support/background.py.
hgx_rocky = pytest.fixture(scope="module", name="hgx_rocky")(
    set_up_in_background(__file__, "hgx-rocky", _hgx_rocky_runs, ensure_engine))


def _said(run: PlaybookRun, text: str) -> bool:
    """Whether the play printed text (the YAML callback wraps long messages)."""
    return " ".join(text.split()) in " ".join(run.output.split())


def _rpm_version(host: TargetHost, name: str) -> str:
    """VERSION-RELEASE of an installed rpm, or rpm's "not installed" line."""
    return host.exec("rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", name,
                     check=False).stdout.strip()


def test_hgx_rocky_converges_and_the_fabric_comes_up(hgx_rocky: HgxRockyRun) -> None:
    """The same decision and fabric check as on apt, reached through dnf."""
    record_timing("HGX H100 Rocky 9 stand-in: driver + Fabric Manager converge",
                  hgx_rocky.first.seconds)
    assert hgx_rocky.first.returncode == 0, hgx_rocky.first.explain()
    assert _said(hgx_rocky.first, "8 NVIDIA GPU(s) Hopper, 4 NVSwitch(es): open kernel modules "
                                  "(nvidia_driver_kernel_modules: auto), branch 580, "
                                  "Fabric Manager.")
    assert _said(hgx_rocky.first, "NVLink fabric initialised on 8 GPU(s): State Completed, "
                                  "Status Success")


def test_fabric_manager_and_nscq_rpms_are_the_drivers_build_and_locked_with_it(
        hgx_rocky: HgxRockyRun) -> None:
    """rpm has nvidia-fabricmanager and libnvidia-nscq at nvidia-driver-cuda's upstream
    version, dnf's versionlock holds each at that build (and nothing else), and systemd runs
    Fabric Manager."""
    assert hgx_rocky.first.returncode == 0, "converge failed; see the first test"
    host = hgx_rocky.host
    driver = host.exec("rpm", "-q", "--qf", "%{VERSION}", DRIVER_PACKAGE).stdout.strip()
    assert driver.startswith("580."), driver
    locked = host.exec("dnf", "-q", "versionlock", "list").stdout.split()
    for name in (FABRIC_MANAGER, NSCQ):
        built = _rpm_version(host, name)
        assert built.split("-")[0] == driver, f"{name} {built}, driver {driver}"
        assert [entry for entry in locked if entry.startswith(f"{name}-0:")] == [
            f"{name}-0:{built}.*"], locked
    assert f"{DRIVER_PACKAGE}-3:{_rpm_version(host, DRIVER_PACKAGE)}.*" in locked, locked
    assert host.exec("systemctl", "is-active", "nvidia-fabricmanager",
                     check=False).stdout.strip() == "active"
    assert host.exec("systemctl", "is-enabled", "nvidia-fabricmanager",
                     check=False).stdout.strip() == "enabled"


def test_hgx_rocky_rerun_changes_nothing(hgx_rocky: HgxRockyRun) -> None:
    assert hgx_rocky.second.returncode == 0, hgx_rocky.second.explain()
    assert hgx_rocky.second.recap["changed"] == 0, hgx_rocky.second.explain()


def test_testinfra_fabric_checks_pass_on_the_hgx_rocky_host(hgx_rocky: HgxRockyRun) -> None:
    """tests/infra's fabric and driver checks, which read rpm on this host, agree."""
    assert hgx_rocky.first.returncode == 0, "converge failed; see the first test"
    suite = run_infra(hgx_rocky.host, [hgx_rocky.vars_file], "tests/infra/test_fabric.py",
                      "tests/infra/test_driver.py")
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    assert "no NVSwitch on this host" not in suite.stdout, "the fabric checks must run here"
