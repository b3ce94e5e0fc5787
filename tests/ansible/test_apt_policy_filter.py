"""apt_candidates / apt_branch_problems: the Secure Boot path's package names, resolved.

Ubuntu's archive keeps a branch's names after the branch ends as transitional packages of
the next branch: in noble, nvidia-driver-590 is a transitional package that depends on
595's, at 595's version (the shape the issue's review found in Ubuntu's archive; the
packages.ubuntu.com pages of nvidia-graphics-drivers-<branch> show the same pattern of
versions). The role resolves the signed-module path's names (Canonical's
linux-modules-nvidia-<branch>-server[-open]-<flavour> and the archive's
nvidia-headless-no-dkms-<branch>-server[-open], nvidia-utils-<branch>-server) with
`apt-cache policy` before it installs any, and stops on a name that resolves to another
branch or to nothing. Checked here with the machine's own apt-cache
(tests/ansible/apt_root.py) on an Ubuntu-archive-shaped stub, and on a generated family of
policy outputs.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.apt_root import AptRoot, require_apt, write_repo
from tests.ansible.filter_plugin import load_filters
from tests.fixtures.aptrepo.catalog import ubuntu_signed_module_packages
from tests.fixtures.aptrepo.debs import StubPackage

_filters = load_filters("apt_policy.py")
apt_candidates = _filters["apt_candidates"]
apt_branch_problems = _filters["apt_branch_problems"]

KERNEL_VERSIONED = "^linux-(modules|objects)-nvidia-"  # vars/main.yml
NEXT = "595.45.04-0ubuntu0.24.04.1"


def _transitional(name: str, target: str) -> StubPackage:
    """A name kept for a finished branch: the next branch's version, depending on its name."""
    return StubPackage(name, NEXT, "Transitional package for " + target, section="oldlibs",
                       source="nvidia-graphics-drivers-595-server", depends=(target,))


def _archive() -> list[StubPackage]:
    return [*ubuntu_signed_module_packages("580"),
            StubPackage("nvidia-utils-595-server", NEXT, "NVIDIA driver support binaries",
                        source="nvidia-graphics-drivers-595-server"),
            StubPackage("nvidia-headless-no-dkms-595-server-open", NEXT, "NVIDIA headless",
                        source="nvidia-graphics-drivers-595-server"),
            _transitional("nvidia-utils-590-server", "nvidia-utils-595-server"),
            _transitional("nvidia-headless-no-dkms-590-server-open",
                          "nvidia-headless-no-dkms-595-server-open")]


def _names(branch: str) -> list[str]:
    """What the role asks for on the open flavour (vars/secureboot.yml, tasks/secureboot.yml)."""
    return [f"nvidia-headless-no-dkms-{branch}-server-open", f"nvidia-utils-{branch}-server",
            f"linux-modules-nvidia-{branch}-server-open-generic",
            f"linux-modules-nvidia-{branch}-server-open-6.8.0-51-generic"]


def test_real_apt_resolves_a_shipped_branch_and_refuses_a_transitional_one(
        tmp_path: Path) -> None:
    require_apt()
    repo = write_repo(tmp_path / "archive", _archive(), "Ubuntu", "Ubuntu")
    apt = AptRoot.create(tmp_path / "apt", [repo], [])
    shipped = apt.run("apt-cache", "policy", *_names("580")).stdout
    assert apt_branch_problems(shipped, _names("580"), "580", KERNEL_VERSIONED) == []
    ended = apt.run("apt-cache", "policy", *_names("590"), check=False).stdout
    assert apt_branch_problems(ended, _names("590"), "590", KERNEL_VERSIONED) == [
        f"nvidia-headless-no-dkms-590-server-open is only at {NEXT} (branch 595: a transitional"
        " package)",
        f"nvidia-utils-590-server is only at {NEXT} (branch 595: a transitional package)",
        "linux-modules-nvidia-590-server-open-generic has no installable version",
        "linux-modules-nvidia-590-server-open-6.8.0-51-generic has no installable version"]


NAMES = st.from_regex(r"[a-z0-9][a-z0-9+.-]{1,30}", fullmatch=True)
VERSIONS = st.from_regex(r"([0-9]:)?[0-9]{3}\.[0-9]{1,3}(\.[0-9]{2})?-[0-9a-z.~+]{1,12}",
                         fullmatch=True)


@settings(max_examples=60)
@given(st.dictionaries(NAMES, st.one_of(st.just(""), VERSIONS), min_size=1, max_size=8))
def test_every_candidate_is_read(candidates: dict[str, str]) -> None:
    blocks = []
    for name, version in candidates.items():
        shown = version or "(none)"
        blocks.append(f"{name}:\n  Installed: (none)\n  Candidate: {shown}\n  Version table:\n"
                      + (f"     {version} 500\n        500 http://archive.ubuntu.com/ubuntu "
                         "noble/restricted amd64 Packages\n" if version else ""))
    assert apt_candidates("".join(blocks)) == candidates
