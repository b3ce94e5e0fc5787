"""Ansible filter: the packages a dnf transaction would remove, read from its summary table.

Why: a driver branch switch on RHEL (`dnf module switch-to nvidia-driver:<stream>`)
moves every package of the old stream, and whatever depends on one of them at its
exact version goes with it. With `--allowerasing` dnf removes such a package without
a word; without it the switch stops on a dependency error. So the role first asks
dnf what it would do (`--assumeno`, nothing changed) and reads the table dnf prints:

    Dependencies resolved.
    ======================================================================
     Package            Arch     Version                 Repository   Size
    ======================================================================
    Downgrading:
     libnvidia-ml       x86_64   3:580.126.16-1.el9      cuda-rhel9   10 k
    Removing dependent packages:
     site-gpu-agent     noarch   1.0-1                   @commandline  0
    Switching module streams:
     nvidia-driver               590-open -> 580-open

    {{ preview.stdout | dnf_removals }}  ->  ['site-gpu-agent']

A package is removed when it is listed under a section whose title starts with
"Removing" (Removing, Removing dependent packages, Removing unused dependencies) or
on a `replacing` line under the package that obsoletes it. A name too long for its
column stands alone on its line and the rest of the row follows, indented: only the
first word of a row (one space in) is its name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# A section title: no indentation, ends with a colon ("Removing dependent packages:").
_SECTION = re.compile(r"^(\S.*):\s*$")
# A package row: one space, then the name (dnf's table indents rows by one).
_ROW = re.compile(r"^ (\S+)")
# An obsoleted package under the one that replaces it: "     replacing  name.arch version".
_REPLACING = re.compile(r"^\s+replacing\s+(\S+)")


def _name_of(replaced: str) -> str:
    """NAME from dnf's NAME.ARCH in a `replacing` line."""
    return replaced.rsplit(".", 1)[0] if "." in replaced else replaced


def dnf_removals(stdout: str) -> list[str]:
    """The names of the packages the transaction in `stdout` would remove, sorted, once each."""
    removed: set[str] = set()
    section = ""
    for line in str(stdout).splitlines():
        title = _SECTION.match(line)
        if title:
            section = title.group(1)
            continue
        if not line.startswith(" "):
            section = ""  # the table's rules, the summary, "Operation aborted."
            continue
        replaced = _REPLACING.match(line)
        if replaced:
            removed.add(_name_of(replaced.group(1)))
            continue
        row = _ROW.match(line)
        if row and section.startswith("Removing"):
            removed.add(row.group(1))
    return sorted(removed)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"dnf_removals": dnf_removals}
