"""apt_unsatisfied: which apt specs a role still has to install, from package_facts.

The package lists have the shape `package_facts` (manager apt) returns; the
re-run tests in test_site.py run the filter through the roles against real apt.
"""

from __future__ import annotations

from collections.abc import Callable

from tests.ansible.filter_plugin import load_filters

apt_unsatisfied: Callable[..., list[str]] = load_filters("apt_packages.py")["apt_unsatisfied"]


def _installed(versions: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    return {name: [{"name": name, "version": version, "arch": "amd64", "source": "apt"}]
            for name, version in versions.items()}


PACKAGES = _installed({"nvidia-smi": "580.95.05-1", "nvidia-kernel-open-dkms": "580.95.05-1",
                       "libcudnn9-cuda-12": "9.8.0.87-1", "docker.io": "20.10.24+dfsg1-1+deb12u1"})


def test_installed_names_and_matching_versions_are_satisfied() -> None:
    assert apt_unsatisfied(PACKAGES, ["nvidia-smi=580.*", "nvidia-kernel-open-dkms=580.*",
                                      "libcudnn9-cuda-12=9.8.0.87-1", "docker.io"]) == []


def test_missing_packages_and_other_versions_are_returned_as_written() -> None:
    specs = ["nvidia-smi=575.*", "libcudnn9-cuda-12=9.10.2.21-1", "nvidia-persistenced",
             "docker.io"]
    assert apt_unsatisfied(PACKAGES, specs) == specs[:3]


def test_a_version_without_wildcard_must_match_whole() -> None:
    # 9.8.0.87-1 is not 9.8.0.87-10, nor a prefix of it.
    assert apt_unsatisfied(_installed({"libcudnn9-cuda-12": "9.8.0.87-10"}),
                           ["libcudnn9-cuda-12=9.8.0.87-1"]) == ["libcudnn9-cuda-12=9.8.0.87-1"]


def test_any_installed_architecture_satisfies() -> None:
    packages = {"libc6": [{"version": "2.36-9", "arch": "i386"},
                          {"version": "2.36-10", "arch": "amd64"}]}
    assert apt_unsatisfied(packages, ["libc6=2.36-10"]) == []


def test_specs_apt_resolves_itself_always_run_apt() -> None:
    specs = ["nvidia-*", "docker.io/bookworm-backports", "dkms>=3.0"]
    assert apt_unsatisfied(_installed({"dkms": "3.0.10-8"}), specs) == specs


def test_no_package_list_means_everything_is_missing() -> None:
    assert apt_unsatisfied(None, ["dkms"]) == ["dkms"]
    assert apt_unsatisfied({}, []) == []
