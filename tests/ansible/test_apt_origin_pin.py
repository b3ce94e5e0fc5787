"""The driver's apt pin by origin: NVIDIA's repository's builds win for the pinned branch.

`Pin: version 580.*` at 1001 matches the branch's builds from every origin, so a PPA's or
Debian Backports' newer point release (580.172.08) became the candidate over NVIDIA's
580.126.16. The role's preference file (templates/nvidia-cuda.pref.j2, rendered here as
the play renders it) now gives every other origin's builds of the driver's packages
priority 50, matching the Release file's Origin and Label against everything but
NVIDIA's (filter_plugins/apt_preferences.py: apt's pins have no negation).

Real apt decides (tests/ansible/apt_root.py: the machine's apt-cache and apt-get on a
private root): NVIDIA's stub repository (Origin "NVIDIA", Label "NVIDIA CUDA", as
NVIDIA's Release files read; tests/fixtures/aptrepo/ubuntu.py's packages of 580 and 590)
beside other origins shaped like the real ones (a Launchpad PPA's "LP-PPA-<team>-<ppa>",
Debian Backports', a mirror published under its own Origin or Label) carrying newer point
releases of 580 drawn from a fixed seed. The complement pattern itself is checked
against glibc's own POSIX matcher (regcomp with apt's flags) on a generated family.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import random
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.apt_root import AptRoot, require_apt, write_repo
from tests.ansible.filter_plugin import load_filters
from tests.ansible.playbook import ANSIBLE_DIR
from tests.fixtures.aptrepo.debs import StubPackage
from tests.fixtures.aptrepo.ubuntu import UBUNTU_DRIVER_VERSIONS, ubuntu_driver_packages

ROLE = ANSIBLE_DIR / "roles" / "nvidia_driver"
NVIDIA_580, NVIDIA_590 = UBUNTU_DRIVER_VERSIONS
# The branch's compute-only set on Ubuntu (vars/Ubuntu.yml) and what it pulls in.
BRANCH_PACKAGES = ["nvidia-headless-580-open", "nvidia-utils-580", "libnvidia-compute-580",
                   "nvidia-dkms-580-open", "nvidia-kernel-common-580"]
DKMS = StubPackage("dkms", "3.0.11-1ubuntu13", "Dynamic Kernel Module Support", source="dkms",
                   architecture="all")
# (Origin, Label) of other origins, as their Release files spell them.
OTHER_ORIGINS = {
    "ppa": ("LP-PPA-graphics-drivers-ppa", "PPA for Graphics Drivers Team"),
    "backports": ("Debian Backports", "Debian Backports"),
    "mirror-own-origin": ("Example Corp mirror", "NVIDIA CUDA"),
    "mirror-own-label": ("NVIDIA", "cuda-mirror (aptly)"),
}
REVISIONS = {"ppa": "-0ubuntu0~gpu24.04.1", "backports": "-1~bpo12+1",
             "mirror-own-origin": "-1ubuntu1", "mirror-own-label": "-1ubuntu1"}


def _newer_point_releases(seed: int = 50) -> dict[str, str]:
    """One newer point release of 580 per other origin (580.127.00 to 580.250.99), fixed seed."""
    draw = random.Random(seed)
    return {key: f"580.{draw.randint(127, 250)}.{draw.randint(0, 99):02d}{REVISIONS[key]}"
            for key in OTHER_ORIGINS}


def _filters() -> dict[str, Any]:
    """Every filter of ansible/filter_plugins, as the play has them."""
    found: dict[str, Any] = {}
    for path in sorted((ANSIBLE_DIR / "filter_plugins").glob("*.py")):
        found.update(load_filters(path.name))
    return found


def render_preferences(branch: str = "580", version: str = "",
                       overrides: dict[str, str] | None = None) -> str:
    """templates/nvidia-cuda.pref.j2 with the role's defaults and vars/main.yml, on Ubuntu."""
    env = jinja2.Environment(keep_trailing_newline=True)
    env.filters.update(_filters())
    values: dict[str, Any] = {**yaml.safe_load((ROLE / "defaults/main.yml").read_text()),
                              **yaml.safe_load((ROLE / "vars/main.yml").read_text()),
                              "nvidia_driver_branch": branch, "nvidia_driver_version": version,
                              **(overrides or {})}
    context = {"ansible_managed": "Ansible managed", "ansible_facts": {"distribution": "Ubuntu"}}
    names = ["nvidia_driver_branch", "nvidia_driver_version", "nvidia_driver_cuda_repo_origin",
             "nvidia_driver_cuda_repo_label", "__nvidia_driver_pinned_names",
             "__nvidia_driver_origin_pinned_sources", "__nvidia_driver_apt_version"]
    for name in names:  # in order: each may use the ones before it, as Ansible's lazy vars do
        if name in values:
            context[name] = env.from_string(str(values[name])).render(**context).strip()
    return env.from_string((ROLE / "templates/nvidia-cuda.pref.j2").read_text()).render(**context)


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """NVIDIA's stub repository and one repository per other origin (built once)."""
    require_apt()
    root = tmp_path_factory.mktemp("origins")
    built = {"nvidia": write_repo(root / "nvidia", ubuntu_driver_packages(NVIDIA_580)
                                  + ubuntu_driver_packages(NVIDIA_590) + [DKMS],
                                  "NVIDIA", "NVIDIA CUDA")}
    for key, version in _newer_point_releases().items():
        origin, label = OTHER_ORIGINS[key]
        built[key] = write_repo(root / key, ubuntu_driver_packages(version), origin, label)
    return built


def _apt(tmp_path: Path, repos: dict[str, Path], keys: list[str], branch: str = "580") -> AptRoot:
    apt = AptRoot.create(tmp_path / "apt", [repos[key] for key in ["nvidia", *keys]], [])
    apt.prefer("nvidia-cuda.pref", render_preferences(branch))
    return apt


@pytest.mark.parametrize("other", list(OTHER_ORIGINS))
def test_another_origins_newer_point_release_does_not_win(tmp_path: Path, repos: dict[str, Path],
                                                          other: str) -> None:
    """Every package of the branch's set: NVIDIA's build is the candidate, the other origin's
    newer one is below an installed version's priority."""
    apt = _apt(tmp_path, repos, [other])
    newer = _newer_point_releases()[other]
    for package in BRANCH_PACKAGES:
        assert apt.candidate(package) == NVIDIA_580, package
        policy = apt.run("apt-cache", "policy", package).stdout
        assert f"{newer} 50" in policy, policy


def test_all_other_origins_at_once_install_nvidias_build(tmp_path: Path,
                                                         repos: dict[str, Path]) -> None:
    """The role's install (the branch's meta-package by name) takes NVIDIA's build of every
    package, with every other origin enabled beside it."""
    apt = _apt(tmp_path, repos, list(OTHER_ORIGINS))
    simulated = apt.run("apt-get", "-s", "install", "nvidia-headless-580-open",
                        "nvidia-utils-580").stdout
    installs = [line for line in simulated.splitlines() if line.startswith("Inst nvidia-")
                or line.startswith("Inst libnvidia-")]
    assert installs, simulated
    assert all(f"({NVIDIA_580} NVIDIA CUDA" in line for line in installs), simulated


def test_the_branch_pin_still_moves_nvidias_builds_across_branches(
        tmp_path: Path, repos: dict[str, Path]) -> None:
    """The origin records touch no build of NVIDIA's: branch 590's names take 590 from it."""
    apt = _apt(tmp_path, repos, list(OTHER_ORIGINS), branch="590")
    assert apt.candidate("libnvidia-compute") == NVIDIA_590
    assert apt.candidate("nvidia-dkms-open") == NVIDIA_590


def test_the_container_toolkits_repository_is_not_pushed_down(
        tmp_path: Path, repos: dict[str, Path]) -> None:
    """The records name the driver's source packages, not the nvidia-* names: the container
    toolkit (source libnvidia-container, its own Origin) keeps its repository's priority."""
    toolkit = StubPackage("nvidia-container-toolkit", "1.17.8-1", "NVIDIA Container toolkit",
                          source="libnvidia-container")
    extra = write_repo(tmp_path / "toolkit", [toolkit],
                       "https://nvidia.github.io/libnvidia-container/stable/deb/amd64",
                       "libnvidia-container")
    apt = AptRoot.create(tmp_path / "apt", [repos["nvidia"], extra], [])
    apt.prefer("nvidia-cuda.pref", render_preferences())
    policy = apt.run("apt-cache", "policy", "nvidia-container-toolkit").stdout
    assert "1.17.8-1 500" in policy, policy


# --- the complement pattern, against glibc's own matcher with apt's flags ---

_REG_EXTENDED, _REG_ICASE, _REG_NOSUB = 1, 2, 8
_LIBC = ctypes.CDLL(ctypes.util.find_library("c"))


def _posix_matches(pattern: str, value: str) -> bool:
    """regcomp/regexec with the flags apt-pkg's ExpressionMatches passes (extended, no case)."""
    compiled = ctypes.create_string_buffer(256)  # sizeof(regex_t) is 64 on glibc x86_64/arm64
    flags = _REG_EXTENDED | _REG_ICASE | _REG_NOSUB
    assert _LIBC.regcomp(compiled, pattern.encode(), flags) == 0, pattern
    try:
        return _LIBC.regexec(compiled, value.encode(), 0, None, 0) == 0
    finally:
        _LIBC.regfree(compiled)


apt_pin_other = load_filters("apt_preferences.py")["apt_pin_other"]
# Origin and Label values: printable ASCII without the comma and slash a pin cannot carry.
VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e,
                               blacklist_characters=",/"), min_size=1, max_size=30)


@given(VALUES, VALUES)
def test_the_pattern_matches_every_value_but_its_own(own: str, other: str) -> None:
    pattern = apt_pin_other(own)
    assert "," not in pattern
    assert pattern.startswith("/") and pattern.endswith("/")
    assert not _posix_matches(pattern[1:-1], own)
    assert _posix_matches(pattern[1:-1], other) == (other.lower() != own.lower())


def test_a_value_a_pin_cannot_carry_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="comma"):
        apt_pin_other("NVIDIA, Inc.")
