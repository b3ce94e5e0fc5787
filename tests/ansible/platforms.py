"""The operating systems site.yml supports, and how a CI container stands in for each.

Ubuntu's userland cannot be reached from CI (only Debian's mirror can), so an
Ubuntu stand-in is the Debian 12 systemd container with Ubuntu's identity
files (/etc/os-release, /etc/lsb-release, /etc/debian_version as Ubuntu ships
them). Ansible's fact gathering reads exactly those, so the play takes the
Ubuntu path for real: NVIDIA's ubuntu2204/ubuntu2404 repository layout, the
Ubuntu package names and every Ubuntu-only task, driven by the real apt and
dpkg. What stays Debian's (base packages, docker.io, kernel headers) is listed
in tests/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """One supported OS: the facts Ansible must see, and the files that produce them."""

    key: str
    distribution: str
    version: str
    os_family: str
    pkg_mgr: str
    identity_files: dict[str, str]

    @property
    def cuda_repo_distro(self) -> str:
        """NVIDIA's name for this OS in its repository paths (debian12, ubuntu2404, ...)."""
        return self.distribution.lower() + self.version.replace(".", "")


def _ubuntu(version: str, point: str, codename: str, debian_base: str) -> Platform:
    pretty = f"Ubuntu {point} LTS"
    short = codename.split()[0]
    os_release = (
        f'PRETTY_NAME="{pretty}"\nNAME="Ubuntu"\nVERSION_ID="{version}"\n'
        f'VERSION="{point} LTS ({codename.title()})"\nVERSION_CODENAME={short}\n'
        "ID=ubuntu\nID_LIKE=debian\nHOME_URL=\"https://www.ubuntu.com/\"\n"
        f"UBUNTU_CODENAME={short}\n"
    )
    lsb_release = (
        f"DISTRIB_ID=Ubuntu\nDISTRIB_RELEASE={version}\n"
        f"DISTRIB_CODENAME={short}\nDISTRIB_DESCRIPTION=\"{pretty}\"\n"
    )
    return Platform(
        key="ubuntu" + version.replace(".", ""), distribution="Ubuntu", version=version,
        os_family="Debian", pkg_mgr="apt",
        identity_files={
            # /etc/os-release is a link to this file on Debian and Ubuntu alike.
            "/usr/lib/os-release": os_release,
            "/etc/lsb-release": lsb_release,
            "/etc/debian_version": f"{debian_base}/sid\n",
        },
    )


DEBIAN12 = Platform(key="debian12", distribution="Debian", version="12", os_family="Debian",
                    pkg_mgr="apt", identity_files={})
UBUNTU2204 = _ubuntu("22.04", "22.04.5", "jammy jellyfish", "bookworm")
UBUNTU2404 = _ubuntu("24.04", "24.04.2", "noble numbat", "trixie")

# The stand-ins beside the Debian 12 container (tests/ansible/test_platforms.py).
STAND_INS = [UBUNTU2204, UBUNTU2404]
