"""apt_removals / apt_installs: what an `apt-get -s` transaction removes and installs.

The nvidia_driver role simulates every apt branch or flavour switch before it changes
anything (tasks/setup-Debian.yml) and stops on a removal it did not name. Two sources
of input here: a generated family of simulations in apt-pkg's pkgSimulate layout
(`Inst name [old] (new release [arch])`, `Remv name [old]`, `Purg`, `Conf`, among
apt's other lines), and the machine's own apt-get simulating the role's switch
(580 -> 590 on Ubuntu, tests/fixtures/aptrepo/ubuntu.py's packages under NVIDIA's
names) on a host with a site package that depends on the old driver.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.apt_root import AptRoot, require_apt, write_repo
from tests.ansible.filter_plugin import load_filters
from tests.fixtures.aptrepo.debs import StubPackage
from tests.fixtures.aptrepo.ubuntu import UBUNTU_DRIVER_VERSIONS, ubuntu_driver_packages

_filters = load_filters("apt_transaction.py")
apt_removals = _filters["apt_removals"]
apt_installs = _filters["apt_installs"]

NAMES = st.from_regex(r"[a-z0-9][a-z0-9+.-]{1,40}(:i386)?", fullmatch=True)
VERSIONS = st.from_regex(r"[0-9]{1,3}\.[0-9]{1,3}(\.[0-9]{2})?-[0-9a-z.~+]{1,12}", fullmatch=True)
NOISE = ["Reading package lists...", "Building dependency tree...", "Reading state information...",
         "The following packages will be REMOVED:", "  nvidia-utils-580 site-gpu-agent",
         "The following NEW packages will be installed:", "  libnvidia-compute",
         "NOTE: This is only a simulation!",
         "      apt-get needs root privileges for real execution.",
         "0 upgraded, 1 newly installed, 2 to remove and 0 not upgraded."]


@st.composite
def simulations(draw: st.DrawFn) -> tuple[str, set[str], set[str]]:
    """apt-get -s output, the names it removes and the names it installs."""
    lines = list(NOISE)
    removed: set[str] = set()
    installed: set[str] = set()
    for name in draw(st.lists(NAMES, min_size=1, max_size=12, unique=True)):
        action = draw(st.sampled_from(["Inst", "Inst-upgrade", "Remv", "Purg", "Conf"]))
        old, new = draw(VERSIONS), draw(VERSIONS)
        if action == "Inst":
            lines.append(f"Inst {name} ({new} NVIDIA CUDA:/ [amd64])")
            installed.add(name)
        elif action == "Inst-upgrade":
            lines.append(f"Inst {name} [{old}] ({new} NVIDIA CUDA:/ [amd64]) []")
            installed.add(name)
        elif action in ("Remv", "Purg"):
            lines.append(f"{action} {name} [{old}]")
            removed.add(name)
        else:
            lines.append(f"Conf {name} ({new} NVIDIA CUDA:/ [amd64])")
    draw(st.randoms()).shuffle(lines)
    return "\n".join(lines) + "\n", removed, installed


@settings(max_examples=50)
@given(simulations())
def test_every_action_and_nothing_else_is_read(simulation: tuple[str, set[str], set[str]]) -> None:
    stdout, removed, installed = simulation
    assert apt_removals(stdout) == sorted(removed)
    assert apt_installs(stdout) == sorted(installed)


def test_nothing_to_do_removes_nothing() -> None:
    assert apt_removals("0 upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n") == []


OLD, NEW = UBUNTU_DRIVER_VERSIONS  # 580.126.16-1ubuntu1, 590.48.01-1ubuntu1
OPEN_580 = ["libnvidia-compute-580", "nvidia-kernel-common-580", "nvidia-firmware-580-580.126.16",
            "nvidia-utils-580", "nvidia-compute-utils-580", "nvidia-kernel-source-580-open",
            "nvidia-dkms-580-open", "nvidia-headless-no-dkms-580-open", "nvidia-headless-580-open"]
SITE_AGENT = StubPackage("site-gpu-agent", "1.0", "A site's agent built against NVML 580",
                         architecture="all", depends=("nvidia-utils-580",))
DKMS = StubPackage("dkms", "3.0.11-1ubuntu13", "Dynamic Kernel Module Support", source="dkms",
                   architecture="all")


def test_real_apt_names_the_site_package_a_branch_switch_removes(tmp_path: Path) -> None:
    """apt-get -s of the role's switch (the 590 set, the branch-named 580 packages with `-`),
    held packages and all: the site's agent is among the removals, beside the named ones."""
    require_apt()
    catalog = {p.name: p for p in ubuntu_driver_packages(OLD)}
    repo = write_repo(tmp_path / "nvidia", ubuntu_driver_packages(OLD)
                      + ubuntu_driver_packages(NEW) + [DKMS], "NVIDIA", "NVIDIA CUDA")
    installed = [catalog[name] for name in OPEN_580] + [DKMS, SITE_AGENT]
    apt = AptRoot.create(tmp_path / "apt", [repo], installed, held=frozenset(OPEN_580))
    switch = apt.run("apt-get", "-s", "install", "--allow-downgrades",
                     "--allow-change-held-packages", "libnvidia-compute", "nvidia-dkms-open",
                     "nvidia-utils", "nvidia-compute-utils", *(f"{name}-" for name in OPEN_580))
    removed = apt_removals(switch.stdout)
    assert "site-gpu-agent" in removed, switch.stdout
    assert set(removed) - {"site-gpu-agent"} <= set(OPEN_580), switch.stdout
    assert {"libnvidia-compute", "nvidia-dkms-open", "nvidia-utils"} <= set(
        apt_installs(switch.stdout)), switch.stdout
