"""Ansible filter: each package's candidate version, read from `apt-cache policy`.

Why: Ubuntu's archive keeps a branch's package names after the branch ends, as
transitional packages that carry the next branch (nvidia-driver-590 depends on 595's,
at 595's version). The Secure Boot path installs Canonical's signed modules and the
archive's `-server` userspace by branch name, so a name can resolve to another branch
or to nothing. The role asks apt for the candidates first and stops with the branch
they belong to. `apt-cache policy` prints one block per package it knows:

    nvidia-utils-590-server:
      Installed: (none)
      Candidate: 595.45.04-0ubuntu0.24.04.1
      Version table:
         595.45.04-0ubuntu0.24.04.1 500
            500 http://archive.ubuntu.com/ubuntu noble-updates/restricted amd64 Packages

    {{ policy.stdout | apt_candidates }}
    ->  {'nvidia-utils-590-server': '595.45.04-0ubuntu0.24.04.1'}

A package apt knows with no installable version (`Candidate: (none)`, a virtual
package) maps to ""; one apt does not know at all has no block ("Unable to locate
package" goes to stderr) and is absent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

_PACKAGE = re.compile(r"^(\S+):$")
_CANDIDATE = re.compile(r"^\s+Candidate:\s*(\S+)\s*$")


def apt_candidates(stdout: str) -> dict[str, str]:
    """package -> candidate version ("" for none) for each package block in `stdout`."""
    found: dict[str, str] = {}
    package = ""
    for line in str(stdout).splitlines():
        header = _PACKAGE.match(line)
        if header:
            package = header.group(1)
            continue
        candidate = _CANDIDATE.match(line)
        if candidate and package:
            found[package] = "" if candidate.group(1) == "(none)" else candidate.group(1)
    return found


_BRANCH = re.compile(r"^(?:[0-9]+:)?([0-9]+)\.")


def apt_branch_problems(stdout: str, names: list[str], branch: str | int,
                        any_version: str = "") -> list[str]:
    """One line per package of `names` that `apt-cache policy` output `stdout` cannot give
    at `branch`: no installable version, or a candidate of another branch (a transitional
    package). Names matching the regular expression `any_version` (Canonical's module
    packages, versioned by the kernel) need only a candidate.

        {{ policy.stdout | apt_branch_problems(['nvidia-utils-590-server'], '590') }}
        -> ['nvidia-utils-590-server is only at 595.45.04-0ubuntu0.24.04.1 (branch 595:
             a transitional package)']
    """
    found = apt_candidates(stdout)
    exempt = re.compile(any_version) if any_version else None
    problems: list[str] = []
    for name in names:
        candidate = found.get(name, "")
        if not candidate:
            problems.append(f"{name} has no installable version")
            continue
        if exempt is not None and exempt.search(name):
            continue
        match = _BRANCH.match(candidate)
        if match is None or match.group(1) != str(branch):
            of = f"branch {match.group(1)}" if match else "no driver branch"
            problems.append(f"{name} is only at {candidate} ({of}: a transitional package)")
    return problems


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"apt_candidates": apt_candidates, "apt_branch_problems": apt_branch_problems}
