"""nvidia_other_branch, nvidia_branch_versioned: which installed packages are whose driver.

The names are the real families: Ubuntu's archive (nvidia-graphics-drivers-<br>[-server]
and linux-restricted-modules), NVIDIA's Ubuntu, Debian and RHEL repositories, and
the lookalikes that share their prefixes (the container toolkit, Ubuntu's CUDA
toolkit, the linux-nvidia kernel's own packages, GPUDirect Storage's nvidia-fs).
tests/ansible/test_other_driver.py runs the filter through the role against real apt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters, load_plugin

FILTERS: dict[str, Callable[..., Any]] = {
    **load_filters("nvidia_packages.py"),
    "branch_of": load_plugin("nvidia_packages.py").branch_of}
branch_of = FILTERS["branch_of"]
other_branch = FILTERS["nvidia_other_branch"]
versioned = FILTERS["nvidia_branch_versioned"]


def _facts(*packages: tuple[str, str], arch: str = "amd64",
           source: str = "apt") -> dict[str, list[dict[str, str]]]:
    """package_facts (manager apt, or rpm) for (name, version) pairs."""
    facts: dict[str, list[dict[str, str]]] = {}
    for name, version in packages:
        facts.setdefault(name, []).append(
            {"name": name, "version": version, "arch": arch, "source": source})
    return facts


KERNEL = "6.8.0-51-generic"
KERNEL_VERSION = "6.8.0-51.52+1"
UBUNTU_535 = "535.288.01-0ubuntu0.24.04.3"
# `ubuntu-drivers install` on a 24.04 server with an A100: nvidia-driver-535-server and
# its dependencies (Ubuntu's nvidia-graphics-drivers-535-server), and Canonical's
# prebuilt modules for the running kernel (linux-restricted-modules).
UBUNTU_ARCHIVE_535 = [
    *[(name, UBUNTU_535) for name in (
        "nvidia-driver-535-server", "nvidia-dkms-535-server", "nvidia-kernel-common-535-server",
        "nvidia-kernel-source-535-server", "nvidia-firmware-535-server-535.288.01",
        "nvidia-compute-utils-535-server", "nvidia-utils-535-server",
        "libnvidia-compute-535-server", "libnvidia-extra-535-server",
        "libnvidia-decode-535-server", "libnvidia-encode-535-server",
        "libnvidia-cfg1-535-server", "libnvidia-fbc1-535-server", "libnvidia-gl-535-server",
        "libnvidia-common-535-server", "xserver-xorg-video-nvidia-535-server")],
    ("linux-modules-nvidia-535-server-generic", KERNEL_VERSION),
    (f"linux-modules-nvidia-535-server-{KERNEL}", KERNEL_VERSION),
    (f"linux-objects-nvidia-535-server-{KERNEL}", KERNEL_VERSION),
    (f"linux-signatures-nvidia-{KERNEL}", KERNEL_VERSION),
]
# What is no driver's, whatever the branch asked for.
NOT_A_DRIVER = [
    ("nvidia-container-toolkit", "1.17.8-1"), ("nvidia-container-toolkit-base", "1.18.0-1"),
    ("libnvidia-container1", "1.17.8-1"), ("libnvidia-container-tools", "1.17.8-1"),
    ("nvidia-prime", "0.8.17.2"), ("libnvidia-egl-wayland1", "1:1.1.13-1build1"),
    ("nvidia-cuda-toolkit", "12.0.140~12.0.1-4build4"), ("nvidia-cudnn", "8.9.2.26~cuda12+3"),
    ("nvidia-fs-dkms", "2.24.3-1"), ("nvlsm", "2025.03.2-1"), ("dkms", "3.0.11-1ubuntu13"),
    (f"linux-image-{KERNEL}", "6.8.0-51.52"), ("linux-image-generic", "6.8.0-51.52"),
    ("linux-modules-6.8.0-1008-nvidia", "6.8.0-1008.8"), ("linux-nvidia", "6.8.0-1008.8"),
    ("linux-image-nvidia", "6.8.0-1008.8"),
    ("linux-modules-nvidia-fs-6.8.0-1008-nvidia", "6.8.0-1008.8"),
    ("cuda-compat-12-8", "570.124.06-0ubuntu1"), ("libcudnn9-cuda-12", "9.8.0.87-1"),
    # Ubuntu 24.04's own settings tool, whatever driver branch is installed beside it.
    ("nvidia-settings", "510.47.03-0ubuntu4"),
]
# Names that share a driver prefix and may carry a driver-like version, yet name no branch.
NO_BRANCH_WHATEVER_THE_VERSION = ("nvidia-container", "libnvidia-container", "nvidia-settings")


def test_the_ubuntu_archive_driver_is_all_another_branch() -> None:
    facts = _facts(*UBUNTU_ARCHIVE_535, *NOT_A_DRIVER)
    assert other_branch(facts, "570") == sorted(name for name, _ in UBUNTU_ARCHIVE_535)
    assert versioned(facts, "570") == []


def test_the_ubuntu_archive_driver_of_the_branch_asked_for_stays() -> None:
    facts = _facts(*UBUNTU_ARCHIVE_535, *NOT_A_DRIVER)
    assert other_branch(facts, 535) == []
    # Held: the userspace at 535.*, not the modules that carry the kernel's version.
    assert versioned(facts, "535") == sorted(name for name, version in UBUNTU_ARCHIVE_535
                                             if version == UBUNTU_535)


def test_signatures_stay_with_a_module_of_the_branch_for_their_kernel() -> None:
    """Secure Boot path: 570's signed modules for KERNEL need its signatures; another
    kernel's signatures (its 535 modules going) do not."""
    old_kernel = "6.8.0-49-generic"
    facts = _facts(*UBUNTU_ARCHIVE_535,
                   (f"linux-modules-nvidia-570-server-open-{KERNEL}", KERNEL_VERSION),
                   (f"linux-objects-nvidia-570-server-open-{KERNEL}", KERNEL_VERSION),
                   (f"linux-modules-nvidia-535-server-{old_kernel}", "6.8.0-49.49+1"),
                   (f"linux-signatures-nvidia-{old_kernel}", "6.8.0-49.49+1"))
    other = other_branch(facts, "570")
    assert f"linux-signatures-nvidia-{KERNEL}" not in other
    assert f"linux-signatures-nvidia-{old_kernel}" in other
    assert f"linux-modules-nvidia-535-server-{old_kernel}" in other
    # A flavour meta of the branch asked for names no kernel: it keeps no signatures.
    meta_only = _facts(("linux-modules-nvidia-570-server-open-generic", KERNEL_VERSION),
                       (f"linux-signatures-nvidia-{KERNEL}", KERNEL_VERSION))
    assert other_branch(meta_only, "570") == [f"linux-signatures-nvidia-{KERNEL}"]


def test_every_architecture_of_a_multiarch_library_is_named() -> None:
    facts = _facts(("libnvidia-compute-535-server", UBUNTU_535))
    facts["libnvidia-compute-535-server"].append(
        {"name": "libnvidia-compute-535-server", "version": UBUNTU_535, "arch": "i386"})
    assert other_branch(facts, "570") == ["libnvidia-compute-535-server:amd64",
                                          "libnvidia-compute-535-server:i386"]


def test_rpm_names_and_epochless_versions() -> None:
    """package_facts (manager rpm) keeps the epoch apart: 570.148.08 of nvidia-driver-cuda."""
    facts = _facts(("nvidia-driver-cuda", "570.148.08"), ("kmod-nvidia-open-dkms", "570.148.08"),
                   ("nvidia-kmod-common", "570.148.08"), ("libnvidia-ml", "570.148.08"),
                   ("nvidia-container-toolkit", "1.17.8"), ("kernel-core", "5.14.0"),
                   arch="x86_64")
    assert other_branch(facts, "575") == ["kmod-nvidia-open-dkms", "libnvidia-ml",
                                          "nvidia-driver-cuda", "nvidia-kmod-common"]
    assert other_branch(facts, "570") == []


# What NVIDIA's guide locks on EL9 with `dnf versionlock '*nvidia*580*'` after installing
# the full driver (its "Version locking" section lists the same names for 575), and
# the compute-only set beside them: every one moves with a branch switch.
EL9_GUIDE_LOCKED = ["kmod-nvidia-open-dkms", "nvidia-kmod-common", "nvidia-driver-cuda-libs",
                    "nvidia-open", "nvidia-xconfig", "xorg-x11-nvidia", "libnvidia-cfg",
                    "nvidia-driver-cuda", "nvidia-driver", "libnvidia-fbc", "nvidia-libXNVCtrl",
                    "nvidia-libXNVCtrl-devel", "libnvidia-ml", "nvidia-modprobe",
                    "nvidia-settings", "nvidia-persistenced", "nvidia-driver-libs"]


def test_every_package_nvidias_el9_guide_locks_belongs_to_its_branch() -> None:
    """On rpm the desktop tool is the driver's: nvidia-settings 580.126.16 is branch 580's,
    and a switch to 590 must release its lock and move it (an apt host's is the site's)."""
    facts = _facts(*[(name, "580.126.16") for name in EL9_GUIDE_LOCKED],
                   ("cuda-drivers", "580.126.16"), ("nvidia-container-toolkit", "1.18.0"),
                   arch="x86_64", source="rpm")
    assert other_branch(facts, "590") == sorted([*EL9_GUIDE_LOCKED, "cuda-drivers"])
    assert versioned(facts, "580") == sorted([*EL9_GUIDE_LOCKED, "cuda-drivers"])
    apt = _facts(("nvidia-settings", "580.126.16-1ubuntu1"))
    assert other_branch(apt, "590") == [] and versioned(apt, "580") == []


@given(st.integers(min_value=100, max_value=999).map(str),
       st.sampled_from(["", ".48.01", ".126.16"]),
       st.sampled_from(["-2ubuntu1", "-0ubuntu1", "-1", "-1.el9"]))
def test_a_pinning_package_belongs_to_the_branch_in_its_name(
        branch: str, build: str, revision: str) -> None:
    """nvidia-driver-pinning-590 ("590-2ubuntu1") and nvidia-driver-pinning-590.48.01
    ("590.48.01-0ubuntu1"): the name says the branch, whatever the version; another
    branch's is moved off (its pin would keep apt on that branch), none is held."""
    name = f"nvidia-driver-pinning-{branch}{build}"
    version = f"{branch}{build}{revision}"
    assert branch_of(name, version) == branch
    facts = _facts((name, version))
    assert other_branch(facts, str(int(branch) % 900 + 100)) == [name]
    assert other_branch(facts, branch) == [] and versioned(facts, branch) == []


BRANCHES = st.integers(min_value=100, max_value=999).map(str)
VARIANTS = st.sampled_from(["", "-open", "-server", "-server-open"])
# Names with the branch in them, as Ubuntu's and NVIDIA's Ubuntu repositories build them
# ({b}: branch, {v}: variant); and NVIDIA's names without it (Debian 12, RHEL, 590 on).
BRANCH_NAMED = ["nvidia-driver-{b}{v}", "nvidia-dkms-{b}{v}", "nvidia-headless-{b}{v}",
                "nvidia-headless-no-dkms-{b}{v}", "nvidia-kernel-source-{b}{v}",
                "nvidia-kernel-common-{b}", "nvidia-utils-{b}", "nvidia-compute-utils-{b}",
                "libnvidia-compute-{b}", "libnvidia-gl-{b}", "libnvidia-cfg1-{b}",
                "xserver-xorg-video-nvidia-{b}", "nvidia-firmware-{b}-{u}",
                "cuda-drivers-{b}", "cuda-drivers-fabricmanager-{b}", "nvidia-fabricmanager-{b}",
                "libnvidia-nscq-{b}", "nvidia-imex-{b}", "libnvsdm-{b}"]
UNNAMED = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-smi", "nvidia-persistenced",
           "libcuda1", "firmware-nvidia-gsp", "cuda-drivers", "nvidia-fabricmanager",
           "kmod-nvidia-latest-dkms", "nvidia-modprobe", "libnvidia-ml1", "xorg-x11-nvidia",
           # NVIDIA's Ubuntu names from 590 (the guide's "Ubuntu 590 package renames").
           "libnvidia-compute", "nvidia-dkms-open", "nvidia-dkms", "libnvidia-nscq",
           # Blackwell's NVSwitch monitoring library and IMEX, at the driver's version.
           "libnvsdm", "nvidia-imex"]
REVISIONS = st.sampled_from(["-1", "-0ubuntu1", "-0ubuntu0.24.04.3", "-1.el9", ""])
KERNELS = st.builds("{}.{}.0-{}-{}".format, st.integers(4, 6), st.integers(0, 19),
                    st.integers(1, 2000), st.sampled_from(["generic", "oem", "nvidia", "aws",
                                                           "lowlatency", "generic-64k"]))
FLAVOURS = st.sampled_from(["generic", "generic-hwe-22.04", "generic-hwe-24.04", "oem-20.04b",
                            "lowlatency-hwe-24.04", "nvidia"])


@st.composite
def driver_version(draw: st.DrawFn, branch: str) -> str:
    epoch = draw(st.sampled_from(["", "1:", "3:"]))
    minor = draw(st.integers(0, 300))
    patch = draw(st.sampled_from(["", ".01", ".08", ".02"]))
    return f"{epoch}{branch}.{minor}{patch}{draw(REVISIONS)}"


@given(st.data(), BRANCHES, VARIANTS)
def test_a_driver_package_belongs_to_the_branch_its_version_names(
        data: st.DataObject, branch: str, variant: str) -> None:
    version = data.draw(driver_version(branch))
    upstream = version.split(":")[-1].split("-")[0]
    # Named after one branch, versioned with another: the version (the files) decides.
    named = data.draw(BRANCHES)
    name = data.draw(st.sampled_from(BRANCH_NAMED + UNNAMED)).format(b=named, v=variant,
                                                                     u=upstream)
    assert branch_of(name, version) == branch


@given(BRANCHES, VARIANTS, st.one_of(KERNELS, FLAVOURS), st.sampled_from(["modules", "objects"]),
       KERNELS.map(lambda kernel: kernel.split("-")[0] + ".52+1"))
def test_a_kernel_module_package_belongs_to_the_branch_in_its_name(
        branch: str, variant: str, kernel: str, kind: str, version: str) -> None:
    name = f"linux-{kind}-nvidia-{branch}{variant}-{kernel}"
    assert branch_of(name, version) == branch
    facts = _facts((name, version))
    assert other_branch(facts, branch) == []
    assert other_branch(facts, str(int(branch) % 900 + 100)) == [name]  # never `branch`
    assert versioned(facts, branch) == []  # never held: the kernel's version


@given(st.sampled_from(NOT_A_DRIVER), BRANCHES, st.data())
def test_lookalikes_belong_to_no_branch(lookalike: tuple[str, str], branch: str,
                                       data: st.DataObject) -> None:
    name, version = lookalike
    assert branch_of(name, version) is None
    # Not even at a version that looks like a driver's (the toolkit's are 1.x, but a
    # mirror could renumber; NVIDIA's repository builds nvidia-settings at each driver's):
    # the name rules them out.
    if name.startswith(NO_BRANCH_WHATEVER_THE_VERSION):
        assert branch_of(name, data.draw(driver_version(branch))) is None
    assert other_branch(_facts(lookalike), branch) == []


@given(st.dictionaries(st.text(min_size=1, max_size=30),
                       st.lists(st.fixed_dictionaries({"version": st.text(max_size=30),
                                                       "arch": st.sampled_from(["amd64", "i386",
                                                                                "all"])}),
                                max_size=2), max_size=6),
       BRANCHES)
def test_any_package_list_gives_disjoint_sorted_answers(
        facts: dict[str, list[dict[str, str]]], branch: str) -> None:
    other = other_branch(facts, branch)
    held = versioned(facts, branch)
    assert other == sorted(other) and held == sorted(held)
    assert not {name.split(":")[0] for name in other} & set(held)
    for name, entries in facts.items():
        for entry in entries:
            found = branch_of(name, entry["version"])
            assert found is None or (len(found) == 3 and found.isdigit())


def test_no_package_list() -> None:
    assert other_branch(None, "570") == [] and versioned({}, "570") == []
