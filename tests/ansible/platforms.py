"""The operating systems site.yml supports, and how a CI container stands in for each.

Ubuntu's userland cannot be reached from CI (only Debian's mirror can), so an
Ubuntu stand-in is the Debian 12 systemd container with Ubuntu's identity
files (/etc/os-release, /etc/lsb-release, /etc/debian_version as Ubuntu ships
them). Ansible's fact gathering reads exactly those, so the play takes the
Ubuntu path for real: NVIDIA's ubuntu2204/ubuntu2404 repository layout, the
Ubuntu package names and every Ubuntu-only task, driven by the real apt and
dpkg. What stays Debian's (base packages, docker.io, kernel headers) is listed
in tests/README.md.

The Rocky 9 stand-in is the same Debian 12 userland with Debian's dnf 4 and
rpm (tests/ansible/rocky.py) and Rocky 9's identity files: Ansible then sees
Rocky 9.5, os_family RedHat, pkg_mgr dnf, and the play takes the RedHat path.
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
        """NVIDIA's name for this OS in its repository paths (debian12, ubuntu2404, rhel9)."""
        if self.os_family == "RedHat":
            return "rhel" + self.version.split(".")[0]
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

_ROCKY_OS_RELEASE = """\
NAME="Rocky Linux"
VERSION="9.5 (Blue Onyx)"
ID="rocky"
ID_LIKE="rhel centos fedora"
VERSION_ID="9.5"
PLATFORM_ID="platform:el9"
PRETTY_NAME="Rocky Linux 9.5 (Blue Onyx)"
ANSI_COLOR="0;32"
LOGO="fedora-logo-icon"
CPE_NAME="cpe:/o:rocky:rocky:9::baseos"
HOME_URL="https://rockylinux.org/"
BUG_REPORT_URL="https://bugs.rockylinux.org/"
SUPPORT_END="2032-05-31"
ROCKY_SUPPORT_PRODUCT="Rocky-Linux-9"
ROCKY_SUPPORT_PRODUCT_VERSION="9.5"
REDHAT_SUPPORT_PRODUCT="Rocky Linux"
REDHAT_SUPPORT_PRODUCT_VERSION="9.5"
"""
_ROCKY_RELEASE = "Rocky Linux release 9.5 (Blue Onyx)\n"

ROCKY9 = Platform(
    key="rocky9", distribution="Rocky", version="9.5", os_family="RedHat", pkg_mgr="dnf",
    identity_files={
        # As on Rocky: os-release in /usr/lib, the release files in /etc (system- and
        # redhat-release are links to rocky-release there; plain copies here).
        "/usr/lib/os-release": _ROCKY_OS_RELEASE,
        "/etc/rocky-release": _ROCKY_RELEASE,
        "/etc/redhat-release": _ROCKY_RELEASE,
        "/etc/system-release": _ROCKY_RELEASE,
        "/etc/system-release-cpe": "cpe:/o:rocky:rocky:9::baseos\n",
    },
)

# The stand-ins beside the Debian 12 container (tests/ansible/test_platforms.py).
STAND_INS = [UBUNTU2204, UBUNTU2404, ROCKY9]
