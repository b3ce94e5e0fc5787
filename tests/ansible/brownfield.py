"""A stand-in host put in the state the vendors' install guides leave it ("brownfield").

Most GPU hosts the play meets were set up by hand first, following NVIDIA's and
Docker's guides. This module puts a booted stand-in (tests/ansible/platforms.py)
in that state, pointing at the stub repositories on 127.0.0.1 at the very URIs
the play manages, so the host's entries and the play's collide as they do on a
real host:

* the repository files and keys of tests/fixtures/vendor_repos (each cites its
  guide): cuda-keyring's `cuda-<distro>-x86_64.list` with its binary keyring,
  Docker's current deb822 `docker.sources` with `/etc/apt/keyrings/docker.asc`,
  the toolkit's `nvidia-container-toolkit.list` with its dearmored keyring; on
  dnf NVIDIA's `cuda-rhel9.repo`, Docker's `docker-ce.repo`, NVIDIA's
  `nvidia-container-toolkit.repo`, and EPEL as `epel-release` configures it
  with CRB enabled (NVIDIA's EL9 guide needs it for dkms);
* a driver of branch 580 (the play is then asked for 590), installed and
  locked the vendors' way: apt - `apt-get install` the branch's compute-only
  packages (named by branch, as up to 580), then `apt-mark hold` on every NVIDIA
  package; dnf - NVIDIA's driver installation guide for RHEL 9 (`dnf module
  enable nvidia-driver:580-open`, `dnf install nvidia-open`: the full driver,
  desktop packages included) and its "Version locking" for DNF 4 (`dnf
  versionlock add '*nvidia*580*'`, which locks nvidia-settings, xorg-x11-nvidia,
  libnvidia-cfg, ... beside the compute packages);
* apt: the distribution's Docker (Debian's docker.io and docker-doc, real
  packages), which Docker's guide removes before Docker CE ("Uninstall old
  versions");
* /etc/docker/daemon.json with a setting of the site's own (USER_DAEMON_SETTING,
  beside target.py's PREEXISTING_DAEMON_JSON).

`snapshot` records what a `--check` run must leave alone: every file under /etc
and /usr/share/keyrings (content or link target), and every package with its
version and hold (dpkg and rpm databases).
"""

from __future__ import annotations

import base64
import json
import subprocess
from dataclasses import dataclass
from typing import Any

from tests.ansible.platforms import Platform
from tests.ansible.target import PREEXISTING_DAEMON_JSON, TargetHost
from tests.fixtures import vendor_repos
from tests.fixtures.aptrepo import CUDA_KEY_NAME, StubRepos
from tests.fixtures.rpmrepo import CUDA_KEY_NAME as CUDA_RPM_KEY_NAME
from tests.fixtures.rpmrepo import EPEL_DIR, EPEL_KEY, RpmRepos

# The branch the guides installed, and the one the play is then asked for: 580 names the
# Ubuntu packages by branch, 590 does not and brings NVIDIA's pinning package.
OLD_BRANCH, NEW_BRANCH = "580", "590"
# A site's own daemon setting (dockerd accepts it in a container): raised open-file limits.
USER_DAEMON_SETTING = {"default-ulimits": {"nofile": {"Name": "nofile", "Hard": 65536,
                                                      "Soft": 65536}}}
# Ubuntu's compute-only driver of a branch, as NVIDIA's repository names it.
UBUNTU_OLD_DRIVER = [f"nvidia-headless-{OLD_BRANCH}-open", f"nvidia-utils-{OLD_BRANCH}"]
# Docker's Ubuntu suites (the stub Docker CE repository is built for these).
DOCKER_SUITES = {"22.04": "jammy", "24.04": "noble"}
# The distribution's Docker the host had (Debian's real packages, from its mirror).
OLD_DOCKER = ["docker.io", "docker-doc"]
# What an NVIDIA package is called, on either package manager.
NVIDIA_PACKAGES = ("nvidia-*", "libnvidia-*", "kmod-nvidia-*")


@dataclass(frozen=True)
class Seeded:
    """What the preparation wrote: the vendors' repository files, and the locked packages."""

    repo_files: list[str]
    locked: list[str]


def write_vendor_file(host: TargetHost, entry: vendor_repos.VendorFile, key: bytes) -> None:
    """Write a vendor's sources file and its keyring as the guide does.

    `key` is the armored key the vendor serves. An `.asc` keyring is that file;
    a `.gpg` one is `gpg --dearmor`ed (the target has no gpg, so that runs here).
    A dnf entry's key is a URL in the file itself: only the file is written.
    """
    host.exec("tee", entry.path, stdin=entry.content)
    if not entry.keyring.startswith("/"):
        return
    host.exec("mkdir", "-p", entry.keyring.rsplit("/", 1)[0])
    if entry.keyring.endswith(".asc"):
        host.exec("tee", entry.keyring, stdin=key.decode())
        return
    binary = subprocess.run(["gpg", "--dearmor"], input=key, capture_output=True,
                            check=True).stdout
    host.exec("sh", "-c", f"base64 -d >{entry.keyring}",
              stdin=base64.b64encode(binary).decode())


def write_user_daemon_json(host: TargetHost) -> dict[str, Any]:
    """The site's daemon.json: the keys start_target wrote, plus the site's own setting."""
    config = {**PREEXISTING_DAEMON_JSON, **USER_DAEMON_SETTING}
    host.exec("tee", "/etc/docker/daemon.json", stdin=json.dumps(config, indent=2) + "\n")
    return config


def prepare_apt(host: TargetHost, platform: Platform, repos: StubRepos, base_url: str) -> Seeded:
    """An Ubuntu stand-in as cuda-keyring, Docker's and the toolkit's guides leave it."""
    distro = platform.cuda_repo_distro
    cuda_dir = repos.root / f"compute/cuda/repos/{distro}/x86_64"
    entries = [
        (vendor_repos.cuda_list(f"{base_url}/compute/cuda/repos/{distro}/x86_64", distro=distro),
         (cuda_dir / CUDA_KEY_NAME).read_bytes()),
        (vendor_repos.docker_sources(f"{base_url}/linux/ubuntu",
                                     suite=DOCKER_SUITES[platform.version]),
         (repos.root / "linux/ubuntu/gpg").read_bytes()),
        (vendor_repos.toolkit_list(f"{base_url}/libnvidia-container"),
         (repos.root / "libnvidia-container/gpgkey").read_bytes()),
    ]
    for entry, key in entries:
        write_vendor_file(host, entry, key)
    host.exec("apt-get", "update", "-qq")
    host.exec("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
              *UBUNTU_OLD_DRIVER, *OLD_DOCKER)
    locked = installed_nvidia_debs(host)
    host.exec("apt-mark", "hold", *locked)
    write_user_daemon_json(host)
    return Seeded([entry.path for entry, _ in entries], locked)


def installed_nvidia_debs(host: TargetHost) -> list[str]:
    """The NVIDIA packages dpkg has installed."""
    listing = host.exec("dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\\n",
                        *NVIDIA_PACKAGES, check=False).stdout
    return sorted(fields[1] for fields in map(str.split, listing.splitlines())
                  if len(fields) == 2 and fields[0] == "ii")


EPEL_REPO = """\
[epel]
name=Extra Packages for Enterprise Linux $releasever - $basearch
baseurl={url}
enabled=1
gpgcheck=1
countme=1
gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-$releasever
"""


def prepare_dnf(host: TargetHost, repos: RpmRepos, base_url: str) -> Seeded:
    """A Rocky stand-in (prepare_rocky done) as NVIDIA's and Docker's EL9 guides leave it.

    EPEL as `epel-release` configures it (the stand-in's mirror in place of the
    metalink) and CRB enabled, then NVIDIA's and Docker's .repo files; dnf
    imports each gpgkey URL on first use, as on a real host.
    """
    host.exec("tee", "/etc/pki/rpm-gpg/RPM-GPG-KEY-EPEL-9",
              stdin=(repos.root / EPEL_KEY).read_text())
    host.exec("tee", "/etc/yum.repos.d/epel.repo",
              stdin=EPEL_REPO.format(url=f"{base_url}/{EPEL_DIR}/"))
    host.exec("dnf", "-q", "config-manager", "--set-enabled", "crb")
    cuda_url = f"{base_url}/compute/cuda/repos/rhel9/x86_64"
    assert (repos.root / "compute/cuda/repos/rhel9/x86_64" / CUDA_RPM_KEY_NAME).exists()
    entries = [vendor_repos.cuda_repo(cuda_url),
               vendor_repos.docker_ce_repo(f"{base_url}/linux/centos"),
               vendor_repos.toolkit_repo(f"{base_url}/libnvidia-container")]
    for entry in entries:
        write_vendor_file(host, entry, b"")
    host.exec("dnf", "-q", "-y", "install", "python3-dnf-plugin-versionlock")
    host.exec("dnf", "-q", "-y", "module", "enable", f"nvidia-driver:{OLD_BRANCH}-open")
    host.exec("dnf", "-q", "-y", "install", "nvidia-open")
    host.exec("dnf", "-q", "versionlock", "add", f"*nvidia*{OLD_BRANCH}*")
    locked = host.exec("dnf", "-q", "versionlock", "list").stdout.split()
    write_user_daemon_json(host)
    return Seeded([entry.path for entry in entries], sorted(locked))


def brownfield_vars(platform: Platform, base_url: str, docker_fingerprint: str) -> dict[str, Any]:
    """What the site's inventory sets on top of CI's for a brownfield host of `platform`."""
    variables: dict[str, Any] = {"nvidia_driver_branch": NEW_BRANCH}
    if platform.pkg_mgr == "apt":
        # The site keeps Docker's repository: Docker CE from its stub, with the role's
        # default packages (tests/fixtures/aptrepo/dockerce.py).
        variables |= {"docker_source": "docker-ce",
                      "docker_ce_repo_base_url": f"{base_url}/linux",
                      "docker_ce_repo_key_fingerprint": docker_fingerprint}
    return variables


SNAPSHOT_SCRIPT = r"""
set -- /etc /usr/share/keyrings
find "$@" -xdev -type f -print0 | sort -z | xargs -0 sha256sum | sed 's/^/file /'
find "$@" -xdev -type l -printf 'link %l %p\n'
dpkg-query -W -f 'dpkg ${Version}/${db:Status-Abbrev}/${db:Status-Want} ${Package}\n'
if command -v rpm >/dev/null; then rpm -qa --qf 'rpm installed %{NEVRA}\n'; fi
"""


def snapshot(host: TargetHost) -> dict[str, str]:
    """Every file under /etc and /usr/share/keyrings, every package: name -> its state.

    A file's state is its sha256 (a link's, its target); a deb's its version,
    status and selection (a hold is the selection); an rpm's that it is installed.
    """
    found = {}
    for line in host.exec("sh", "-c", SNAPSHOT_SCRIPT).stdout.splitlines():
        kind, state, name = line.split(maxsplit=2)
        found[f"{kind}:{name}"] = state
    return found


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """One line per file or package that appeared, went, or changed."""
    return [f"{name}: {before.get(name, '(absent)')} -> {after.get(name, '(absent)')}"
            for name in sorted(set(before) | set(after)) if before.get(name) != after.get(name)]
