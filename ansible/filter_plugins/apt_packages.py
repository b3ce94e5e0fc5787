"""Ansible filter: the apt package specs that the installed packages do not satisfy yet.

Why: on an idempotent re-run every role's `apt: state=present` opened apt's cache
(1 to 1.7 s each, five to seven times per play) only to find that nothing was to be
done. The play lists the installed packages once (`package_facts`), so each role
can ask this filter first and run apt only when a package is missing or at another
version:

    {{ ansible_facts['packages'] | apt_unsatisfied(['nvidia-smi=580.*', 'dkms']) }}
    -> ['nvidia-smi=580.*']     (dkms installed; nvidia-smi missing or not at 580.*)

A spec is satisfied exactly when the apt module would find nothing to install for
it: `name` when the package is installed at any version, `name=version` when an
installed version matches `version` as an fnmatch pattern (what the module
compares: `nvidia-smi=580.*` is satisfied by 580.65.06-1 and by 580.95.05-1).
One difference is on purpose: for a wildcard version with a newer matching build
in the repository, the apt module installs that build (undocumented legacy
behaviour), which for held packages fails ("E: Unable to correct problems, you
have held broken packages"). A satisfied spec is left as it is: a held driver
stays at the build it was installed at until the branch itself changes.

Specs apt resolves itself (a name with wildcards, `name>=version`, `name/release`)
are always returned, so apt runs for them as before.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_APT_DECIDES = re.compile(r"[*?\[\]/<>]")


def _installed_versions(packages: Mapping[str, Any], name: str) -> list[str]:
    return [str(entry.get("version", "")) for entry in packages.get(name) or []]


def _satisfied(packages: Mapping[str, Any], spec: str) -> bool:
    name, equals, version = spec.partition("=")
    if _APT_DECIDES.search(name):
        return False
    installed = _installed_versions(packages, name)
    if not equals:
        return bool(installed)
    return any(fnmatch.fnmatch(found, version) for found in installed)


def apt_unsatisfied(packages: Mapping[str, Any] | None, specs: Iterable[str]) -> list[str]:
    """The specs of `specs` that `packages` (ansible_facts['packages']) does not satisfy."""
    found = packages or {}
    return [str(spec) for spec in specs if not _satisfied(found, str(spec))]


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"apt_unsatisfied": apt_unsatisfied}
