"""Ansible filters: which installed packages belong to an NVIDIA driver, and of which branch.

Why: a host can carry a driver that this play did not install. Ubuntu's own
archive (`ubuntu-drivers install`) names its packages after the branch
(nvidia-driver-535-server, libnvidia-compute-535-server, ...) and adds
Canonical's prebuilt kernel modules from linux-restricted-modules, whose
versions are the kernel's, not the driver's:

    linux-modules-nvidia-535-server-generic            6.8.0-51.52+1  (per kernel flavour)
    linux-modules-nvidia-535-server-6.8.0-51-generic   6.8.0-51.52+1  (per kernel)
    linux-objects-nvidia-535-server-6.8.0-51-generic   6.8.0-51.52+1  (the module objects)
    linux-signatures-nvidia-6.8.0-51-generic           6.8.0-51.52+1  (every branch's signatures)

A branch change that looked only at versions (`535.*`) removed the userspace
and left these behind: a second kernel module of the old branch next to the
new one. So a package belongs to a branch

* by its version, for the driver's own packages (nvidia-*, libnvidia-*,
  libcuda*, libnvsdm* (NVSwitch monitoring on Blackwell, at the driver's version),
  firmware-nvidia*, cuda-drivers*, xserver-xorg-video-nvidia-*, and
  RHEL's kmod-nvidia-* and xorg-x11-nvidia) whose version starts with a branch
  (`535.`, `3:580.`); the version decides, not the name (Ubuntu's transitional
  nvidia-driver-535 can carry 550's version and files);
* by its name, for NVIDIA's driver pinning packages (NVIDIA driver installation
  guide, "Version locking", APT): nvidia-driver-pinning-<branch> (version
  "590-2ubuntu1") and nvidia-driver-pinning-<driver version> each hold the apt
  pin of one branch, and a pin of another branch left on the host would keep
  apt choosing that branch's builds;
* by its name, for the kernel-versioned module packages
  (`linux-(modules|objects)-nvidia-<branch>[-server][-open]-...`);
* linux-signatures-nvidia-<kernel> names no branch: it goes with the last
  module package of that kernel, so it belongs to another branch exactly when no
  module package of the configured branch for that kernel is installed.

The container toolkit (nvidia-container-*, libnvidia-container*) shares the
prefixes, not the versions, and never belongs to a branch; neither does a
Debian or Ubuntu nvidia-settings, whose version looks like a driver's but names
no branch the driver needs (Ubuntu 24.04's own is 510.47.03 whatever driver is
installed; the desktop tool is the site's, and the play neither removes nor
holds it); nor does any package whose version is not a driver version
(nvidia-prime 0.8.17, libnvidia-egl-wayland1 1:1.1.13). An rpm nvidia-settings
does belong to its branch: NVIDIA's EL9 module stream ships it at the driver's
version (`dnf versionlock '*nvidia*580*'` locks it), and a branch switch moves it.

    {{ ansible_facts['packages'] | nvidia_other_branch('570') }}
    -> ['libnvidia-compute-535-server', 'linux-modules-nvidia-535-server-6.8.0-51-generic', ...]
    {{ ansible_facts['packages'] | nvidia_branch_versioned('570') }}
    -> the packages at a 570.* version: what the role holds
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# The driver's own packages: their version is the driver's.
_VERSIONED = re.compile(
    r"^(nvidia-|libnvidia-|libcuda|libnvsdm|firmware-nvidia|cuda-drivers|xserver-xorg-video-nvidia-"
    r"|kmod-nvidia|xorg-x11-nvidia$)")
# Same prefixes, no driver branch: the container toolkit.
_NOT_DRIVER = re.compile(r"^(nvidia-container|libnvidia-container)")
# The desktop settings tool: the driver's on rpm, the site's on apt (see above).
_SETTINGS = "nvidia-settings"
# NVIDIA's apt pinning packages: the branch is the first three digits of the name.
_PINNING = re.compile(r"^nvidia-driver-pinning-([0-9]{3})(?:$|\.)")
# A driver version: the branch (3 digits) and a dot, after an optional epoch.
_DRIVER_VERSION = re.compile(r"^(?:[0-9]+:)?([0-9]{3})\.")
# Canonical's prebuilt modules: the branch in the name, then the variant, then the
# kernel flavour (generic, generic-hwe-24.04) or the kernel release (6.8.0-51-generic).
_MODULES = re.compile(
    r"^linux-(?:modules|objects)-nvidia-([0-9]{3})(?:-server)?(?:-open)?-(.+)$")
_SIGNATURES = re.compile(r"^linux-signatures-nvidia-([0-9].*)$")


def branch_of(name: str, version: str, source: str = "apt") -> str | None:
    """The driver branch `name` at `version` belongs to, or None when it is no driver package.

    `source` is package_facts' manager ("apt" or "rpm"). linux-signatures-nvidia-*
    is None here: its branch depends on the other installed packages
    (nvidia_other_branch decides it).
    """
    if _NOT_DRIVER.match(name) or (name == _SETTINGS and source != "rpm"):
        return None
    named = _MODULES.match(name) or _PINNING.match(name)
    if named:
        return named.group(1)
    if _VERSIONED.match(name):
        found = _DRIVER_VERSION.match(version)
        return found.group(1) if found else None
    return None


def _entries(packages: Mapping[str, Any] | None) -> Iterator[tuple[str, str, str, str]]:
    """(name, version, arch, source) of every installed package, as package_facts lists them."""
    for name, entries in (packages or {}).items():
        for entry in entries or []:
            yield (str(name), str(entry.get("version", "")), str(entry.get("arch", "")),
                   str(entry.get("source", "apt")))


def _names(found: list[tuple[str, str]]) -> list[str]:
    """Names for apt and apt-mark: `name:arch` where one name is installed for several
    architectures (multiarch i386 libraries), so that every copy moves, else `name`."""
    arches: dict[str, set[str]] = {}
    for name, arch in found:
        arches.setdefault(name, set()).add(arch)
    return sorted({f"{name}:{arch}" if len(arches[name]) > 1 else name for name, arch in found})


def nvidia_other_branch(packages: Mapping[str, Any] | None, branch: str | int) -> list[str]:
    """The installed packages of a driver of another branch than `branch`, sorted.

    What a branch change must unhold and, once the new branch is installed, remove.
    """
    wanted = str(branch)
    other: list[tuple[str, str]] = []
    kept_kernels: set[str] = set()
    signatures: list[tuple[str, str, str]] = []
    for name, version, arch, source in _entries(packages):
        signed = _SIGNATURES.match(name)
        if signed:
            signatures.append((name, arch, signed.group(1)))
            continue
        found = branch_of(name, version, source)
        if found is None:
            continue
        if found != wanted:
            other.append((name, arch))
            continue
        modules = _MODULES.match(name)
        if modules:
            kept_kernels.add(modules.group(2))
    other += [(name, arch) for name, arch, kernel in signatures if kernel not in kept_kernels]
    return _names(other)


def nvidia_branch_versioned(packages: Mapping[str, Any] | None, branch: str | int) -> list[str]:
    """The installed driver packages whose version is on `branch`, sorted: what is held.

    The kernel-versioned module packages are not among them: they follow the
    kernel's upgrades (their version is the kernel's); nor are the pinning
    packages, which hold no driver file.
    """
    wanted = str(branch)
    # Plain names, as `apt-mark showhold` prints them: the role compares the two.
    return sorted({name for name, version, _, source in _entries(packages)
                   if not _MODULES.match(name) and not _PINNING.match(name)
                   and branch_of(name, version, source) == wanted})


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"nvidia_other_branch": nvidia_other_branch,
                "nvidia_branch_versioned": nvidia_branch_versioned}
