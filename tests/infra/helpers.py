"""Small queries the infra tests share (package state on the target)."""

from __future__ import annotations

import json
from typing import Any


def held_packages(host: Any) -> set[str]:
    """Packages dpkg keeps at their version (apt-mark hold)."""
    return set(host.check_output("apt-mark showhold").split())


def installed_version(host: Any, name: str) -> str:
    """Installed version of a package ('' when not installed)."""
    package = host.package(name)
    return package.version if package.is_installed else ""


def daemon_json(host: Any) -> dict[str, Any]:
    """Docker's /etc/docker/daemon.json on the target."""
    loaded: dict[str, Any] = json.loads(host.file("/etc/docker/daemon.json").content_string)
    return loaded
