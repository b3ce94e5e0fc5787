"""Ansible filters: the installed NVIDIA driver's version, and package specs pinned to it.

Why: Fabric Manager refuses to start unless its version is the loaded driver's, to
the build ("fabric manager version X does not match the driver version Y"). A
plain `state: present` install takes the newest build of the branch, which differs
from the held driver as soon as the repository carries a newer point release. So
the role reads the driver's version from the package list (`package_facts`) and
asks the package manager for Fabric Manager at exactly that build, as NVIDIA's
driver containers do (`nvidia-fabricmanager-570=570.148.08-1`,
`dnf install nvidia-fabric-manager-570.148.08`).

    {{ ansible_facts['packages'] | installed_driver_versions(['nvidia-driver-cuda']) }}
    -> ['570.148.08']
    {{ ['nvidia-fabricmanager-570'] | at_driver_version('570.148.08', 'apt') }}
    -> ['nvidia-fabricmanager-570=570.148.08-*']

The version compared is the upstream one (what `nvidia-smi` and Fabric Manager
report): apt's versions lose their epoch and Debian revision (570.148.08-1,
570.172.08-0ubuntu0.24.04.1 -> 570.148.08, 570.172.08), rpm's `version` field is
already upstream (its release is separate). The apt spec leaves the revision
open (`-*`): Ubuntu's archive packages the driver as -0ubuntu..., NVIDIA's
repository Fabric Manager as -1, and both are the same build.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

# An apt version: [epoch:]upstream[-revision]; the revision is after the last hyphen.
_APT_VERSION = re.compile(r"^(?:[0-9]+:)?(?P<upstream>.+?)(?:-[^-]*)?$")


def _upstream(entry: Mapping[str, Any]) -> str:
    version = str(entry.get("version", ""))
    if entry.get("source") == "rpm":
        return version
    found = _APT_VERSION.match(version)
    return found.group("upstream") if found else ""


def installed_driver_versions(packages: Mapping[str, Any] | None,
                              names: Iterable[str]) -> list[str]:
    """The distinct upstream versions at which `names` are installed, sorted.

    One version is the normal answer; none means the driver is not installed (check
    mode before the first run); several mean a driver in pieces, which the role refuses
    rather than guess which build the kernel module is.
    """
    found = packages or {}
    versions = {_upstream(entry) for name in names for entry in found.get(str(name)) or []}
    return sorted(version for version in versions if version)


def installed_at_other_version(packages: Mapping[str, Any] | None, names: Iterable[str],
                               version: str) -> list[str]:
    """The names of `names` installed at an upstream version other than `version`: a
    Fabric Manager of another build, whose version lock must go before dnf can move it."""
    found = packages or {}
    return [str(name) for name in names
            if any(_upstream(entry) != version for entry in found.get(str(name)) or [])]


def at_driver_version(names: Iterable[str], version: str, manager: str) -> list[str]:
    """Install specs for `names` at the upstream `version`: apt `name=version-*`, dnf
    `name-version`."""
    if not version:
        raise ValueError("at_driver_version needs the driver's version")
    if manager == "apt":
        return [f"{name}={version}-*" for name in names]
    if manager in ("dnf", "rpm"):
        return [f"{name}-{version}" for name in names]
    raise ValueError(f"at_driver_version: unknown package manager {manager!r} (apt or dnf)")


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"installed_driver_versions": installed_driver_versions,
                "installed_at_other_version": installed_at_other_version,
                "at_driver_version": at_driver_version}
