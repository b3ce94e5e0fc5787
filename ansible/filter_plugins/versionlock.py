"""Ansible filter: the dnf version locks that pin packages to another version than the wanted one.

Why one filter: four roles (nvidia_driver, cuda_toolkit, cudnn, nvidia_container_toolkit)
move version-locked packages to a new version, and dnf hides every build but the locked
one, so each first deletes the locks on its packages that name another version. The
selection was the same Jinja regex pair written four times.

    {{ locks.stdout_lines | other_versionlocks(['libcudnn9-cuda-12'], '9.10.2.21-1') }}
    -> ["libcudnn9-cuda-12-0:9.8.0.87-1.el9.*"]

`versionlocks_of` gives every lock line of some packages, whatever the version: the
driver's kernel-module package of the flavour a host moves away from
(kmod-nvidia-open-dkms when it moves to the proprietary modules).

A lock line is NAME-EPOCH:VERSION-RELEASE.ARCH pattern (`dnf versionlock list`); it
names the wanted version when VERSION-RELEASE starts with `version` followed by a dot
("575" matches 575.57.08-1.el9, "9.10.2.21-1" matches 9.10.2.21-1.el9).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any


def other_versionlocks(lines: Iterable[str], names: Iterable[str], version: str) -> list[str]:
    """The lock lines of `names` whose version is not `version` (nor a build of it)."""
    wanted = [str(name) for name in names]
    if not wanted:
        return []
    lock = re.compile(rf"({'|'.join(map(re.escape, wanted))})-[0-9]+:(.*)")
    return [line for line in lines
            if (found := lock.match(line)) and not found.group(2).startswith(f"{version}.")]


def versionlocks_of(lines: Iterable[str], names: Iterable[str]) -> list[str]:
    """The lock lines of `names`, whatever version they lock."""
    wanted = [str(name) for name in names]
    if not wanted:
        return []
    lock = re.compile(rf"({'|'.join(map(re.escape, wanted))})-[0-9]+:")
    return [line for line in lines if lock.match(line)]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"other_versionlocks": other_versionlocks, "versionlocks_of": versionlocks_of}
