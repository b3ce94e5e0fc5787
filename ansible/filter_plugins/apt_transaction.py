"""Ansible filter: what an apt transaction would remove and install, read from `apt-get -s`.

Why: a driver branch switch on apt is one `apt-get install <new> <old>-` transaction.
apt removes without a word whatever depends on a package that goes (a site's
`site-gpu-agent` that depends on nvidia-utils-580) or conflicts with one that comes.
dnf has `--assumeno`; apt's equivalent is the simulation (`apt-get -s`, nothing
changed, no root needed), which prints one line per action (apt-pkg's
pkgSimulate, the same on Debian 12 and Ubuntu 22.04/24.04):

    Remv site-gpu-agent [1.0]
    Remv nvidia-utils-580 [580.126.16-1ubuntu1]
    Inst libnvidia-compute (590.48.01-1ubuntu1 NVIDIA CUDA:/ [amd64])
    Inst nvidia-utils [580.126.16-1ubuntu1] (590.48.01-1ubuntu1 NVIDIA CUDA:/ [amd64])
    Purg nvidia-kernel-common-580 [580.126.16-1ubuntu1]
    Conf libnvidia-compute (590.48.01-1ubuntu1 NVIDIA CUDA:/ [amd64])

    {{ preview.stdout | apt_removals }}
    ->  ['nvidia-kernel-common-580', 'nvidia-utils-580', 'site-gpu-agent']
    {{ preview.stdout | apt_installs }}
    ->  ['libnvidia-compute', 'nvidia-utils']

`Remv` and `Purg` remove, `Inst` installs, upgrades or downgrades. A name apt
qualifies with an architecture (`libnvidia-compute-580:i386`, multiarch) is
returned as apt-get and apt-mark take it, qualified. Every other line (apt's
notes, "The following packages will be REMOVED:" lists, `Conf`) is ignored: the
action lines alone say what the transaction does.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

# One action line: the action, the package (with an optional :arch), then apt's details.
_ACTION = re.compile(r"^(Inst|Remv|Purg) (\S+)(?: |$)")


def _actions(stdout: str, wanted: tuple[str, ...]) -> list[str]:
    found = {match.group(2) for match in map(_ACTION.match, str(stdout).splitlines())
             if match and match.group(1) in wanted}
    return sorted(found)


def apt_removals(stdout: str) -> list[str]:
    """The packages the simulated transaction in `stdout` removes or purges, sorted, once each."""
    return _actions(stdout, ("Remv", "Purg"))


def apt_installs(stdout: str) -> list[str]:
    """The packages the simulated transaction in `stdout` installs, upgrades or downgrades."""
    return _actions(stdout, ("Inst",))


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"apt_removals": apt_removals, "apt_installs": apt_installs}
