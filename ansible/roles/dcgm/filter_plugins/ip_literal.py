"""Ansible filter: which IP version a literal address is (4, 6), or 0 for anything else.

Why: dcgm_exporter_address goes into `docker run --publish ADDRESS:PORT:9400` and into
the exporter's DCGM_EXPORTER_LISTEN. A host name, a CIDR, a zone index ("fe80::1%eth0")
or stray text there would fail late, inside Docker, or listen somewhere unintended; the
role refuses it before anything runs. Python's ipaddress decides, not a regular
expression, and no netaddr is needed on the controller.

    {{ '10.0.0.5' | dcgm_ip_version }} -> 4      {{ 'gpu1.example' | dcgm_ip_version }} -> 0
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any


def dcgm_ip_version(value: object) -> int:
    """4 or 6 for a literal IPv4/IPv6 address without brackets or zone, else 0."""
    if not isinstance(value, str) or value != value.strip() or "%" in value:
        return 0
    try:
        return ipaddress.ip_address(value).version
    except ValueError:
        return 0


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"dcgm_ip_version": dcgm_ip_version}
