"""The Rocky 9 stand-in: Debian 12's userland driven by Debian's own dnf 4 and rpm.

Rocky's userland cannot be reached from CI, so the target image is the Debian
12 systemd image plus Debian's `dnf`, `python3-dnf`, `dnf-plugins-core`, `rpm`
and `python3-rpm` (what `ansible.builtin.dnf`, `package_facts` with the rpm
manager, `rpm_key`, `yum_repository` and `dnf_versionlock` use). Three things
make that dnf behave as Rocky's does (/work/shared/reference/rpm-on-debian.md):

* rpm's database is where Rocky keeps it (/var/lib/rpm; Debian's rpm defaults
  to ~/.rpmdb so that it never pretends to own the system);
* dnf-plugins-core's `local` plugin is off (it adds a repository under
  /var/lib/dnf/plugins/local that does not exist, and every transaction fails);
* `standin-base`, a noarch rpm from the stand-in's BaseOS repository, provides
  what the Debian userland already has (/bin/sh, system-release(releasever),
  python3, systemd, ...), so the stubs' dependencies resolve as on Rocky.

Docker on Rocky comes from Docker CE's repository (docker_source: docker-ce,
the role's default). The stub docker-ce and containerd.io rpms must give a
working engine, because tests/infra talks to it: the image carries Debian's
docker.io, containerd, runc and tini files, extracted with `dpkg-deb -x` under
/opt/standin/docker and not registered with dpkg, and the stub rpms install
thin wrappers in /usr/bin and Docker CE's systemd units. Before the converge
there is no dockerd, docker group or unit on the host, as on a fresh Rocky.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
from pathlib import Path
from typing import Any

from tests.ansible.target import TargetHost, target_image
from tests.fixtures.rpmrepo import RpmRepos

DNF_PACKAGES = ["dnf", "python3-dnf", "dnf-plugins-core", "rpm", "python3-rpm"]
STANDIN_DOCKER = "/opt/standin/docker"
# Files a real (not --check) run creates first on the RedHat path; none may exist after --check.
RPM_CHECK_MODE_WITNESSES = [
    "/etc/yum.repos.d/cuda-rhel9-x86_64.repo",
    "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda",
    "/etc/yum.repos.d/epel.repo",
    "/etc/yum.repos.d/docker-ce-stable.repo",
    "/etc/yum.repos.d/nvidia-container-toolkit.repo",
]
# Debian's packages whose files the stub Docker CE rpms wrap (what dockerd needs to run).
DOCKER_DEBS = ["docker.io", "containerd", "runc", "tini", "libdevmapper1.02.1", "dmsetup"]

# Debian's docker files under /opt/standin (not registered with dpkg), layered on the Debian
# family's target image: what the stub Docker CE packages wrap, rpm (Rocky) and deb (the
# Ubuntu brownfield host, whose Docker CE comes from Docker's stub apt repository).
STANDIN_DOCKERFILE = f"""\
FROM {{base}}
RUN apt-get update -qq \\
 && cd /tmp && apt-get download -qq {' '.join(DOCKER_DEBS)} \\
 && mkdir -p {STANDIN_DOCKER} \\
 && for deb in /tmp/*.deb; do dpkg-deb -x "$deb" {STANDIN_DOCKER}; done \\
 && rm -f /tmp/*.deb && rm -rf /var/lib/apt/lists/*
"""

# Layered on that (one debootstrap for all): Debian's dnf and rpm, rpm's database where
# Rocky keeps it, the local plugin off, Rocky's key directory.
DOCKERFILE = f"""\
FROM {{base}}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
    {' '.join(DNF_PACKAGES)} >/dev/null \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /etc/rpm /var/lib/rpm /etc/pki/rpm-gpg /etc/yum.repos.d \\
 && printf '%%_dbpath /var/lib/rpm\\n' >/etc/rpm/macros.dbpath \\
 && rpm --initdb \\
 && printf '[main]\\nenabled = 0\\n' >/etc/dnf/plugins/local.conf
"""


def standin_docker_image() -> str:
    """The target image with Debian's docker files under /opt/standin/docker (built once)."""
    return _build("tfhost/standin-docker", STANDIN_DOCKERFILE.format(base=target_image()))


def rocky_image() -> str:
    """The Rocky stand-in image (built once per recipe; the tag is the recipe's hash)."""
    return _build("tfhost/rocky9-standin", DOCKERFILE.format(base=standin_docker_image()))


def _build(name: str, recipe: str) -> str:
    tag = f"{name}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    # One build at a time: a background job and the foreground may both ask first.
    Path("/run/lock").mkdir(exist_ok=True)  # a tmpfs: the lock files go with the next boot
    with open(f"/run/lock/tfhost-{tag.replace('/', '_').replace(':', '_')}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if subprocess.run(["docker", "image", "inspect", tag], capture_output=True,
                          check=False).returncode == 0:
            return tag
        built = subprocess.run(
            ["docker", "build", "--network", "host", "--force-rm", "--tag", tag, "-"],
            input=recipe, capture_output=True, text=True, check=False, timeout=900,
            env=_legacy_builder_env(),
        )
    if built.returncode != 0:
        raise RuntimeError(f"building {tag} failed: {built.stderr[-2000:]}")
    return tag


def _legacy_builder_env() -> dict[str, str]:
    """The classic builder: it needs no BuildKit daemon and honours --network host."""
    return {**os.environ, "DOCKER_BUILDKIT": "0"}


def prepare_rocky(host: TargetHost, repos: RpmRepos, base_url: str) -> None:
    """Make a booted stand-in container a fresh Rocky 9 server.

    Rocky's repository file (BaseOS, AppStream, CRB off) points at the stub
    repositories, Rocky's key is in /etc/pki/rpm-gpg, `standin-base` is
    installed from BaseOS with dnf, as the first rpm of the system, and Rocky's
    container tools (podman, buildah, runc) from AppStream.
    """
    host.exec("rm", "-f", "/etc/debian_version")
    host.exec("tee", "/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9", stdin=repos.rocky_key)
    host.exec("tee", "/etc/yum.repos.d/rocky.repo", stdin=repos.rocky_repo_file(base_url))
    host.exec("rpm", "--import", "/etc/pki/rpm-gpg/RPM-GPG-KEY-Rocky-9")
    host.exec("dnf", "-q", "-y", "--releasever=9", "install", "standin-base")
    # A Rocky server as installed with the "Server" environment has Podman, Buildah and
    # runc from AppStream; Docker CE's containerd.io conflicts with runc.
    host.exec("dnf", "-q", "-y", "install", "podman", "buildah", "runc")


def rocky_vars(repos: RpmRepos, base_url: str) -> dict[str, Any]:
    """What CI passes on top of tests/ansible/lab.py's CONTAINER_VARS on the Rocky stand-in."""
    return {
        **repos.ansible_vars(base_url),
        # Docker CE from the stub docker-ce-stable repository: the role's default on Rocky.
        "docker_source": "docker-ce",
        # The container runs the CI machine's kernel, for which Rocky has no kernel-devel;
        # the unversioned names are what DKMS would build against (as linux-headers-amd64
        # on the Debian family).
        "nvidia_driver_kernel_headers_packages": ["kernel-devel", "kernel-headers"],
    }
