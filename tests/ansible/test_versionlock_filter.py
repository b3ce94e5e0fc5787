"""other_versionlocks / versionlocks_of: the lock lines a version or flavour change deletes.

The lines are what `dnf versionlock list` prints on the Rocky 9 stand-in
(NAME-EPOCH:VERSION-RELEASE.*); the upgrade tests in test_platforms.py run the
filter through the roles against real dnf.
"""

from __future__ import annotations

from tests.ansible.filter_plugin import load_filters

FILTERS = load_filters("versionlock.py")
other_versionlocks = FILTERS["other_versionlocks"]
versionlocks_of = FILTERS["versionlocks_of"]

LOCKS = [
    "nvidia-driver-cuda-3:570.148.08-1.el9.*",
    "nvidia-driver-cuda-libs-3:570.148.08-1.el9.*",
    "nvidia-fabricmanager-0:575.57.08-1.el9.*",
    "libcudnn9-cuda-12-0:9.8.0.87-1.el9.*",
    "libcudnn9-devel-cuda-12-0:9.10.2.21-1.el9.*",
    "nvidia-container-toolkit-0:1.17.8-1.*",
]


def test_locks_of_another_version_are_selected() -> None:
    driver = ["nvidia-driver-cuda", "nvidia-driver-cuda-libs", "nvidia-fabricmanager"]
    assert other_versionlocks(LOCKS, driver, "575") == [
        "nvidia-driver-cuda-3:570.148.08-1.el9.*", "nvidia-driver-cuda-libs-3:570.148.08-1.el9.*"]
    cudnn = ["libcudnn9-cuda-12", "libcudnn9-devel-cuda-12"]
    assert other_versionlocks(LOCKS, cudnn, "9.10.2.21-1") == [
        "libcudnn9-cuda-12-0:9.8.0.87-1.el9.*"]


def test_a_name_is_matched_whole_and_a_version_as_a_prefix_up_to_a_dot() -> None:
    # "nvidia-driver-cuda" must not take the -libs lock; "57" is not branch 575 or 570.
    assert other_versionlocks(LOCKS, ["nvidia-driver-cuda"], "570") == []
    assert other_versionlocks(LOCKS, ["nvidia-driver-cuda"], "57") == [
        "nvidia-driver-cuda-3:570.148.08-1.el9.*"]


def test_nothing_to_release() -> None:
    assert other_versionlocks([], ["nvidia-container-toolkit"], "1.18.0-1") == []
    assert other_versionlocks(LOCKS, [], "575") == []
    assert other_versionlocks(LOCKS, ["nvidia-container-toolkit"], "1.17.8-1") == []


def test_every_lock_of_a_package_whatever_its_version() -> None:
    flavour = [*LOCKS, "kmod-nvidia-open-dkms-3:575.57.08-1.el9.*"]
    assert versionlocks_of(flavour, ["kmod-nvidia-open-dkms"]) == [
        "kmod-nvidia-open-dkms-3:575.57.08-1.el9.*"]
    # Whole names only: nvidia-driver-cuda leaves the -libs lock alone.
    assert versionlocks_of(LOCKS, ["nvidia-driver-cuda"]) == [
        "nvidia-driver-cuda-3:570.148.08-1.el9.*"]
    assert versionlocks_of(LOCKS, []) == []
    assert versionlocks_of(LOCKS, ["kmod-nvidia-latest-dkms"]) == []
