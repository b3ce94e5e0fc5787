"""A driver switch on apt that never removes what the play did not name, and a pin by origin
(Ubuntu 24.04 stand-in, the driver role only).

One container, NVIDIA's stub repository (tests/fixtures/aptrepo: 580.126.16 and 590.48.01
under NVIDIA's Ubuntu names, its pinning packages) and, beside it on the host, two other
origins carrying a newer point release of 580, signed and served like the others: a
Launchpad-PPA-shaped one (Origin "LP-PPA-graphics-drivers-ppa", 580.172.08) and a
Debian-Backports-shaped one (Origin and Label "Debian Backports", 580.165.02), plus a
site's repository with `site-gpu-agent`, which depends on nvidia-utils-580.

1. Branch 580: NVIDIA's build is installed and held, not the PPA's or backports' newer one,
   and NVIDIA's pinning package for 580 is installed before it, as NVIDIA's guide does; a
   second run changes nothing (the host keeps nvidia-driver-pinning-580).
2. The site installs site-gpu-agent. Branch 590: apt's simulation of the switch would remove
   it, so the play stops before any change, naming it and nvidia_driver_allow_removal;
   every package, hold and file under /etc/apt is as before.
3. Branch 590 with nvidia_driver_allow_removal: [site-gpu-agent]: the switch runs, the agent
   goes, 590 is installed and held with its pinning package.

Before the fix the switch removed site-gpu-agent without a word, the PPA's build won the
branch pin, and the role removed nvidia-driver-pinning-580.
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
from tests.fixtures.aptrepo import build_repo, build_stub_repos, serve_directory
from tests.fixtures.aptrepo.debs import StubPackage
from tests.fixtures.aptrepo.signing import generate_key
from tests.fixtures.aptrepo.ubuntu import UBUNTU_DRIVER_VERSIONS, ubuntu_driver_packages
from tests.support.background import set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

NVIDIA_580, NVIDIA_590 = UBUNTU_DRIVER_VERSIONS
PPA_BUILD = "580.172.08-0ubuntu0~gpu24.04.1"
BACKPORTS_BUILD = "580.165.02-1~bpo12+1"
# (directory, Origin, Label, packages) of the repositories beside NVIDIA's.
SITE_AGENT = StubPackage("site-gpu-agent", "1.0", "A site's agent built against NVML 580",
                         architecture="all", section="misc", depends=("nvidia-utils-580",))
OTHER_REPOS = [
    ("ppa", "LP-PPA-graphics-drivers-ppa", "PPA for Graphics Drivers Team",
     ubuntu_driver_packages(PPA_BUILD)),
    ("backports", "Debian Backports", "Debian Backports", ubuntu_driver_packages(BACKPORTS_BUILD)),
    ("site", "Example site", "Example site packages", [SITE_AGENT]),
]
SET_580 = ["nvidia-headless-580-open", "nvidia-utils-580", "libnvidia-compute-580",
           "nvidia-dkms-580-open", "nvidia-kernel-common-580"]
SET_590 = ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils", "nvidia-compute-utils"]


@dataclass
class SwitchRuns:
    first: PlaybookRun
    after_first: dict[str, str]
    second: PlaybookRun
    refused: PlaybookRun
    before_refused: str
    after_refused: str
    allowed: PlaybookRun
    after_allowed: dict[str, str]


def _installed(host: TargetHost) -> dict[str, str]:
    """package -> "version want" for every installed package."""
    listing = host.exec("dpkg-query", "-W", "-f",
                        "${Package} ${Version} ${db:Status-Want} ${db:Status-Status}\\n").stdout
    return {fields[0]: f"{fields[1]} {fields[2]}"
            for fields in (line.split() for line in listing.splitlines())
            if len(fields) == 4 and fields[3] == "installed"}


def _state(host: TargetHost) -> str:
    """Packages, holds and apt's files: everything a refused switch must leave as it was."""
    return host.exec("sh", "-c", "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev} "
                     "${db:Status-Want}\\n'; find /etc/apt -type f -exec md5sum {} + | sort").stdout


@contextmanager
def _switch_runs(workdir: Path) -> Iterator[SwitchRuns]:
    repos = build_stub_repos(workdir / "repos")
    key = generate_key(workdir / "other-key", "other origins stub <other@example.invalid>")
    try:
        for directory, origin, label, packages in OTHER_REPOS:
            build_repo(repos.root / directory, packages, key, origin, label)
        (repos.root / "other-key.asc").write_text(key.public_armored)
    finally:
        key.close()
    with serve_directory(repos.root, workdir / "http.log") as base_url:
        lab = Lab(workdir, repos, base_url, "127.0.0.1:9", target_image())
        host = start_target(lab.target_image, f"tfhost-aptswitch-{os.getpid()}", UBUNTU2404)
        try:
            inventory = write_inventory(workdir / "inventory.yml", host.name)

            def play(log: str, **variables: object) -> PlaybookRun:
                extra = lab.extra_vars_file(f"{log}.vars.yml", variables)
                return run_playbook(inventory, [lab.vars_file, extra], workdir / log,
                                    "--tags", "nvidia_driver")

            host.exec("sh", "-c", "mkdir -p /etc/apt/keyrings && cat >/etc/apt/keyrings/other.asc",
                      stdin=(repos.root / "other-key.asc").read_text())
            host.exec("sh", "-c", "for r in " + " ".join(d for d, *_ in OTHER_REPOS) + "; do "
                      "echo \"deb [signed-by=/etc/apt/keyrings/other.asc] "
                      f"{base_url}/$r/ /\" >/etc/apt/sources.list.d/$r.list; done")
            host.exec("apt-get", "update", "-qq")
            first = play("first.log", nvidia_driver_branch="580")
            after_first = _installed(host)
            second = play("second.log", nvidia_driver_branch="580")
            host.exec("apt-get", "install", "-qq", "-y", "site-gpu-agent")
            before_refused = _state(host)
            refused = play("refused.log", nvidia_driver_branch="590")
            after_refused = _state(host)
            allowed = play("allowed.log", nvidia_driver_branch="590",
                           nvidia_driver_allow_removal=["site-gpu-agent"])
            yield SwitchRuns(first, after_first, second, refused, before_refused, after_refused,
                             allowed, _installed(host))
        finally:
            host.remove()


switch = pytest.fixture(scope="module", name="switch")(
    set_up_in_background(__file__, "apt-switch", _switch_runs, ensure_engine))


def test_nvidias_build_wins_over_a_ppa_and_backports(switch: SwitchRuns) -> None:
    assert switch.first.returncode == 0, switch.first.explain()
    for name in SET_580:
        assert switch.after_first.get(name, "").split() == [NVIDIA_580, "hold"], (
            f"{name}: {switch.after_first.get(name)}")


def test_nvidias_pinning_package_for_580_is_installed_and_kept(switch: SwitchRuns) -> None:
    assert "nvidia-driver-pinning-580" in switch.after_first, sorted(switch.after_first)
    assert switch.second.returncode == 0, switch.second.explain()
    assert switch.second.recap["changed"] == 0, switch.second.explain()


def test_a_switch_that_would_remove_a_sites_package_stops_unchanged(switch: SwitchRuns) -> None:
    run = switch.refused
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("nvidia_driver : Refuse a switch that would remove packages the "
                               "play did not name"), run.explain()
    said = " ".join(run.output.split())
    assert "would remove site-gpu-agent, which the play did not name" in said, run.explain()
    assert "nvidia_driver_allow_removal: [site-gpu-agent]" in said, run.explain()
    assert "`apt-get remove site-gpu-agent`" in said, run.explain()
    assert run.recap["changed"] == 0, run.explain()
    assert switch.after_refused == switch.before_refused


def test_the_named_removal_lets_the_switch_run(switch: SwitchRuns) -> None:
    assert switch.allowed.returncode == 0, switch.allowed.explain()
    installed = switch.after_allowed
    assert "site-gpu-agent" not in installed
    for name in SET_590:
        assert installed.get(name, "").split() == [NVIDIA_590, "hold"], (
            f"{name}: {installed.get(name)}")
    assert "nvidia-driver-pinning-590" in installed
    assert not [name for name in installed if "-580" in name], sorted(installed)
