#!/usr/bin/python
"""Ansible module: the installed packages from dpkg's database, as package_facts lists them."""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: dpkg_package_facts
short_description: The installed packages from dpkg's database, in package_facts' shape
description:
  - Sets C(ansible_facts.packages) as C(ansible.builtin.package_facts) with C(manager=apt) does
    (name to a list of C(name), C(version), C(arch), C(category), C(source=apt)), read with one
    C(dpkg-query --show) instead of python-apt's cache.
  - Why not package_facts itself - it builds python-apt's cache of every package the host's
    indexes know (about 63000 on Debian 12) to keep the few hundred installed ones - 0.91 s a
    task against 0.34 s for this on an idle Debian 12 host (docs/benchmarks.md) - and the roles
    list the packages again after each install (six times in a first converge, once in every
    later run).
  - The same keys as python-apt's - a package of the host's own architecture (or C(all)) by its
    name, one of a foreign architecture as C(name:arch) (multiarch C(i386) libraries). Installed
    means dpkg has its files (every state but C(not-installed) and C(config-files)), as
    python-apt's C(is_installed).
  - No C(origin) (python-apt's archive origin of the installed version) - nothing in the roles
    reads it, and dpkg does not know it.
  - Also sets C(ansible_facts.dpkg_holds), the packages whose selection is C(hold) (what
    C(apt-mark showhold) lists), keyed as in C(packages), from the same C(dpkg-query): the roles
    hold their packages without a C(apt-mark showhold) of their own.
options: {}
"""

EXAMPLES = r"""
- name: List the installed packages
  dpkg_package_facts:
"""

RETURN = r"""
ansible_facts:
  description: C(packages), name to the list of its installed versions; C(dpkg_holds), the held
    packages' names, sorted.
  returned: always
  type: dict
"""

# dpkg's states for a package whose files are not (or no longer) on disk.
NOT_INSTALLED = {"not-installed", "config-files"}
# The selection (dpkg's "want": install, hold, deinstall, purge) first, then the state.
FORMAT = ("${db:Status-Want}\t${db:Status-Status}\t${Package}\t${Version}\t${Architecture}"
          "\t${Section}\n")
# The pattern lists every package dpkg's database knows: without one, dpkg-query leaves out
# the not-installed ones, and with them a package held before it was installed, which
# apt-mark showhold lists (and apt-get install refuses to install).
QUERY = ["dpkg-query", "--show", "--showformat", FORMAT, "*"]


def _entries(listing: str, native_arch: str) -> list[tuple[str, str, str, str, str, str]]:
    """(want, status, key, version, arch, section) per well-formed line, keyed as python-apt."""
    entries = []
    for line in listing.splitlines():
        fields = line.split("\t")
        if len(fields) != 6:
            continue
        want, status, name, version, arch, section = fields
        key = name if arch in (native_arch, "all") else f"{name}:{arch}"
        entries.append((want, status, key, version, arch, section))
    return entries


def installed_packages(listing: str, native_arch: str) -> dict[str, list[dict[str, str]]]:
    """`dpkg-query --show --showformat FORMAT` output -> package_facts' apt dictionary."""
    packages: dict[str, list[dict[str, str]]] = {}
    for _want, status, key, version, arch, section in _entries(listing, native_arch):
        if status in NOT_INSTALLED:
            continue
        packages.setdefault(key, []).append({"name": key, "version": version, "arch": arch,
                                             "category": section, "source": "apt"})
    return packages


def held_packages(listing: str, native_arch: str) -> list[str]:
    """The packages whose selection is hold, installed or not (as `apt-mark showhold`)."""
    return sorted({key for want, _status, key, *_ in _entries(listing, native_arch)
                   if want == "hold"})


def main() -> None:
    module = AnsibleModule(argument_spec={}, supports_check_mode=True)
    rc, arch, err = module.run_command(["dpkg", "--print-architecture"])
    if rc != 0:
        module.fail_json(msg=f"dpkg --print-architecture failed: {err.strip()}")
    rc, listing, err = module.run_command(QUERY)
    if rc != 0:
        module.fail_json(msg=f"dpkg-query --show failed: {err.strip()}")
    facts: dict[str, Any] = {"packages": installed_packages(listing, arch.strip()),
                             "dpkg_holds": held_packages(listing, arch.strip())}
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
