"""Ansible filter: read `systemctl show -p Id,LoadState,UnitFileState,ActiveState U1 U2 ...`.

Why: a role that manages many units (libvirt's modular daemons are 32 on RHEL 9)
reads their state with one command and changes only the ones that differ, in one
`systemctl enable`/`start`/`disable --now`, instead of one module call per unit on
every run.

    {{ show.stdout | systemd_units }}
    -> {"virtqemud.socket": {"LoadState": "loaded", "UnitFileState": "enabled",
                             "ActiveState": "active"}, ...}

`systemctl show` prints one block of NAME=VALUE lines per unit, blocks separated
by an empty line, in the order the units were named; a unit that does not exist
has LoadState=not-found.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def systemd_units(output: str) -> dict[str, dict[str, str]]:
    """unit name -> its properties, from `systemctl show -p Id,...` output."""
    units: dict[str, dict[str, str]] = {}
    for block in str(output).strip().split("\n\n"):
        properties = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if "Id" not in properties:
            if block.strip():
                raise ValueError(f"a systemctl show block without Id=: {block.strip()[:200]!r}")
            continue
        units[properties.pop("Id")] = properties
    return units


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"systemd_units": systemd_units}
