"""A private apt: the machine's own apt-get and apt-cache, pointed at a directory of their own.

Why: which build apt takes under the role's pins, and what a switch transaction removes,
are apt's decisions; a test that re-implemented them would test itself. apt reads its
configuration, its lists and the dpkg status from paths it is told (Dir, Dir::Etc,
Dir::State::status), so a test can run the real resolver, unprivileged and without a
container, against stub repositories (tests/fixtures/aptrepo: real .deb files and
indexes under NVIDIA's package names) and a dpkg status file it writes: what a host has
installed and held. Only simulations run here (`apt-cache policy`, `apt-get -s`); the
play tests install for real in the stand-in containers.

The repositories are read as `file:` sources with `[trusted=yes]`: signatures are
tested elsewhere (tests/ansible/test_trust.py); here only each Release file's Origin
and Label matter, which the pins match.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.aptrepo.debs import StubPackage, build_deb
from tests.fixtures.aptrepo.index import write_index


def require_apt() -> None:
    """Skip where the machine has no apt (the suite runs on Debian; a developer's Mac has none)."""
    if shutil.which("apt-get") is None or shutil.which("apt-cache") is None:
        pytest.skip("these tests run the machine's own apt-get and apt-cache")


def write_repo(directory: Path, packages: list[StubPackage], origin: str, label: str) -> Path:
    """A flat repository (suite "/") of `packages`, its Release naming `origin` and `label`."""
    directory.mkdir(parents=True, exist_ok=True)
    write_index(directory, [(p, build_deb(p, directory)) for p in packages],
                origin=origin, label=label)
    return directory


def status_stanza(package: StubPackage, held: bool = False) -> str:
    """The dpkg status entry of `package` installed (and held): what `dpkg -i` records."""
    want = "hold" if held else "install"
    return f"Status: {want} ok installed\n" + package.control(1)


@dataclass(frozen=True)
class AptRoot:
    """apt's configuration, lists and dpkg status under `root`."""

    root: Path

    @classmethod
    def create(cls, root: Path, repos: list[Path], installed: list[StubPackage],
               held: frozenset[str] = frozenset()) -> AptRoot:
        for sub in ("etc/apt/preferences.d", "etc/apt/sources.list.d", "etc/apt/apt.conf.d",
                    "var/lib/apt/lists/partial", "var/cache/apt/archives/partial",
                    "var/lib/dpkg"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "etc/apt/sources.list").write_text(
            "".join(f"deb [trusted=yes] file:{repo} /\n" for repo in repos))
        apt = cls(root)
        apt.install_status(installed, held)
        apt.run("apt-get", "update", "-qq")
        return apt

    def install_status(self, installed: list[StubPackage],
                       held: frozenset[str] = frozenset()) -> None:
        """Write the dpkg status: `installed` as installed, those named in `held` held."""
        (self.root / "var/lib/dpkg/status").write_text(
            "\n".join(status_stanza(p, p.name in held) for p in installed))

    def prefer(self, name: str, text: str) -> None:
        """Write /etc/apt/preferences.d/<name> of this apt."""
        (self.root / "etc/apt/preferences.d" / name).write_text(text)

    def options(self) -> list[str]:
        root = self.root
        return ["-o", f"Dir={root}", "-o", f"Dir::Etc={root}/etc/apt",
                "-o", f"Dir::State::status={root}/var/lib/dpkg/status",
                "-o", "Dir::Etc::trusted=/dev/null", "-o", f"Dir::Etc::TrustedParts={root}/none",
                "-o", "Debug::NoLocking=1", "-o", "APT::Architecture=amd64",
                "-o", "APT::Architectures::=amd64"]

    def run(self, tool: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`tool` (apt-get, apt-cache) with this apt's paths, then `args`."""
        result = subprocess.run([tool, *self.options(), *args], capture_output=True, text=True,
                                check=False, timeout=120,
                                env={"LC_ALL": "C", "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                     "DEBIAN_FRONTEND": "noninteractive"})
        if check and result.returncode != 0:
            raise AssertionError(f"{tool} {' '.join(args)}: rc {result.returncode}\n"
                                 f"{result.stdout}{result.stderr}")
        return result

    def candidate(self, package: str) -> str:
        """The version `apt-cache policy` names as the candidate of `package`."""
        policy = self.run("apt-cache", "policy", package).stdout
        for line in policy.splitlines():
            if line.strip().startswith("Candidate:"):
                return line.split(":", 1)[1].strip()
        raise AssertionError(f"no candidate line for {package}:\n{policy}")
