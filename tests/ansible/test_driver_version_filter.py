"""installed_driver_versions / at_driver_version: Fabric Manager pinned to the driver's build.

The package lists have the shape `package_facts` returns (apt: the whole Debian version;
rpm: version and release apart); the HGX converge (tests/hardware/test_hgx_converge.py)
runs the filters through the role against real apt and a repository with a newer point
release. The dnf specs are checked here only: no stand-in host runs Fabric Manager on dnf.
"""

from __future__ import annotations

import fnmatch
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters

FILTERS = load_filters("driver_version.py")
installed_driver_versions = FILTERS["installed_driver_versions"]
installed_at_other_version = FILTERS["installed_at_other_version"]
at_driver_version = FILTERS["at_driver_version"]


def _apt(versions: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    return {name: [{"name": name, "version": version, "arch": "amd64", "source": "apt"}]
            for name, version in versions.items()}


def _rpm(versions: dict[str, str]) -> dict[str, list[dict[str, Any]]]:
    return {name: [{"name": name, "version": version, "release": "1.el9", "epoch": 3,
                    "arch": "x86_64", "source": "rpm"}] for name, version in versions.items()}


DEBIAN = _apt({"nvidia-driver-cuda": "570.148.08-1", "nvidia-kernel-open-dkms": "570.148.08-1",
               "nvidia-smi": "570.148.08-1", "nvidia-fabricmanager-570": "570.999.01-1",
               "dkms": "3.0.10-8+deb12u1"})


def test_the_debian_driver_has_one_upstream_version() -> None:
    assert installed_driver_versions(DEBIAN, ["nvidia-driver-cuda", "nvidia-kernel-open-dkms",
                                              "nvidia-smi", "nvidia-persistenced"]) == [
        "570.148.08"]


def test_ubuntu_archive_revisions_and_epochs_are_not_part_of_the_build() -> None:
    ubuntu = _apt({"nvidia-utils-570-server": "570.172.08-0ubuntu0.24.04.1",
                   "nvidia-headless-no-dkms-570-server-open": "1:570.172.08-0ubuntu0.24.04.1"})
    assert installed_driver_versions(ubuntu, list(ubuntu)) == ["570.172.08"]


def test_rpm_versions_are_upstream_already() -> None:
    rocky = _rpm({"nvidia-driver-cuda": "570.148.08", "kmod-nvidia-open-dkms": "570.148.08"})
    assert installed_driver_versions(rocky, ["nvidia-driver-cuda", "kmod-nvidia-open-dkms"]) == [
        "570.148.08"]


def test_no_driver_installed_gives_no_version_and_a_split_driver_gives_both() -> None:
    assert installed_driver_versions({}, ["nvidia-driver-cuda"]) == []
    assert installed_driver_versions(None, ["nvidia-driver-cuda"]) == []
    split = _apt({"nvidia-driver-cuda": "570.148.08-1", "nvidia-smi": "570.999.01-1"})
    assert installed_driver_versions(split, list(split)) == ["570.148.08", "570.999.01"]


def test_a_fabric_manager_of_another_build_is_found() -> None:
    assert installed_at_other_version(DEBIAN, ["nvidia-fabricmanager-570"], "570.148.08") == [
        "nvidia-fabricmanager-570"]
    assert installed_at_other_version(DEBIAN, ["nvidia-fabricmanager-570"], "570.999.01") == []
    rocky = _rpm({"nvidia-fabric-manager": "570.148.08"})
    assert installed_at_other_version(rocky, ["nvidia-fabric-manager", "nvidia-fabricmanager"],
                                      "570.148.08") == []


def test_specs_as_nvidias_driver_container_writes_them() -> None:
    assert at_driver_version(["nvidia-fabricmanager-570"], "570.148.08", "apt") == [
        "nvidia-fabricmanager-570=570.148.08-*"]
    assert at_driver_version(["nvidia-fabric-manager"], "570.148.08", "dnf") == [
        "nvidia-fabric-manager-570.148.08"]
    with pytest.raises(ValueError, match="driver's version"):
        at_driver_version(["nvidia-fabricmanager"], "", "apt")
    with pytest.raises(ValueError, match="unknown package manager"):
        at_driver_version(["nvidia-fabricmanager"], "580.65.06", "zypper")


_part = st.integers(min_value=0, max_value=999).map(str)
_upstream = st.builds(lambda a, b, c: f"{a}.{b}.{c}", _part, _part, _part)
_revision = st.from_regex(r"[0-9][0-9a-z.+~]{0,20}", fullmatch=True)


@given(upstream=_upstream, other=_upstream, revision=_revision, fm_revision=_revision,
       epoch=st.sampled_from(["", "1:", "3:"]))
def test_the_apt_spec_matches_every_revision_of_the_drivers_build_and_no_other_build(
        upstream: str, other: str, revision: str, fm_revision: str, epoch: str) -> None:
    """What apt compares (fnmatch on the version): the driver's build with any Debian
    revision is the spec's, another build is not, whatever its revision."""
    packages = _apt({"nvidia-smi": f"{epoch}{upstream}-{revision}"})
    [version] = installed_driver_versions(packages, ["nvidia-smi"])
    assert version == upstream
    [spec] = at_driver_version(["nvidia-fabricmanager-570"], version, "apt")
    pattern = spec.split("=", 1)[1]
    assert fnmatch.fnmatch(f"{upstream}-{fm_revision}", pattern)
    assert fnmatch.fnmatch(f"{other}-{fm_revision}", pattern) == (other == upstream)
