"""A Debian 12 container with systemd as PID 1, standing in for a GPU host.

Why a container and not a VM: it boots in seconds, and systemd, apt, dpkg,
dockerd and the users are all real; only the kernel is shared, which the
roles handle exactly as on a GPU-less VM (nvidia-smi says "No devices were
found"). The image comes from Debian's mirror (debootstrap + docker import).

This machine runs cgroup v1 and its root lacks CAP_SYS_RESOURCE, so
`--privileged` cannot be used (runc fails to apply the full capability set);
the container gets every other capability, no seccomp/AppArmor profile and a
writable cgroup tree instead, which is what systemd and a nested dockerd need.
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass

from tests.ansible.platforms import DEBIAN12, Platform
from tests.support.docker_engine import build_base_image

TARGET_PACKAGES = ",".join(
    [
        "systemd", "systemd-sysv", "dbus", "python3", "python3-apt", "ca-certificates",
        "initramfs-tools", "kmod", "procps",
        # Every supported server has sudo; the CI inventory becomes through it
        # (tests/ansible/playbook.py).
        "sudo",
    ]
)

# Units that have no business in a container sharing the host's network and
# devices: udev would replay kernel events for the host's devices, timesyncd
# would set the host's clock (the container holds CAP_SYS_TIME).
MASKED_UNITS = [
    "systemd-udevd.service", "systemd-udevd-control.socket", "systemd-udevd-kernel.socket",
    "systemd-udev-trigger.service", "systemd-udev-settle.service", "systemd-timesyncd.service",
    "systemd-networkd.service", "systemd-resolved.service", "getty@tty1.service",
    "console-getty.service", "apt-daily.timer", "apt-daily-upgrade.timer",
]

# A daemon.json the site had before Ansible ran: the roles must keep its keys.
PREEXISTING_DAEMON_JSON = {"labels": ["tfhost-ci=preexisting"], "max-concurrent-downloads": 2}

# An ordinary login account, for docker_users / ngc_users.
TEST_USER = "tfuser"


def target_image() -> str:
    """Build (or reuse) the systemd base image; returns its content-addressed tag."""
    return build_base_image("tfhost/debian-systemd", TARGET_PACKAGES)


def docker(*args: str, check: bool = True,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI against the engine in DOCKER_HOST."""
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                            check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)} failed: {result.stderr.strip()[-2000:]}")
    return result


@dataclass
class TargetHost:
    """A running target container."""

    name: str

    def exec(self, *command: str, check: bool = True,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run a command inside the container (as root)."""
        args = ["docker", "exec", *(["-i"] if stdin is not None else []), self.name, *command]
        result = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=300,
                                check=False)
        if check and result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} in {self.name} failed "
                               f"(rc {result.returncode}): {result.stderr.strip()[-2000:]}")
        return result

    def container_id(self) -> str:
        """The container's full ID, as its processes' cgroup paths carry it."""
        return docker("inspect", "--format", "{{.Id}}", self.name).stdout.strip()

    def read(self, path: str) -> str:
        return self.exec("cat", path).stdout

    def unit_states(self, units: list[str]) -> dict[str, str]:
        """unit -> "ENABLED/ACTIVE", as systemctl is-enabled and is-active say it."""
        return {unit: "{}/{}".format(
            self.exec("systemctl", "is-enabled", unit, check=False).stdout.strip(),
            self.exec("systemctl", "is-active", unit, check=False).stdout.strip())
            for unit in units}

    def reboot(self) -> None:
        """Reboot the stand-in: systemd (PID 1) shuts down, and boots again in the container.

        What a reboot keeps and loses is real: the disk stays, /run and /tmp (tmpfs)
        start empty, and only what the units on disk start at boot runs again.
        """
        docker("restart", "--time", "20", self.name, timeout=120)
        _wait_for_systemd(self)

    def remove(self) -> None:
        """Stop systemd cleanly (SIGRTMIN+3), then delete the container."""
        docker("stop", "--time", "20", self.name, check=False, timeout=60)
        docker("rm", "--force", "--volumes", self.name, check=False, timeout=60)


def start_target(image: str, name: str, platform: Platform = DEBIAN12) -> TargetHost:
    """Boot `image` with systemd and prepare it like a freshly installed `platform` server."""
    docker("rm", "--force", "--volumes", name, check=False)
    docker(
        "run", "--detach", "--name", name, "--hostname", name,
        "--network", "host",
        "--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE",
        "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        "--cgroupns", "host", "--volume", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
        # dockerd inside needs a filesystem it can layer on; the image's overlay is not one.
        "--volume", "/var/lib/docker",
        "--stop-signal", "SIGRTMIN+3",
        image, "/sbin/init",
    )
    host = TargetHost(name)
    try:
        _wait_for_systemd(host)
        _prepare(host, platform)
    except Exception:
        host.remove()
        raise
    return host


def _wait_for_systemd(host: TargetHost, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        state = host.exec("systemctl", "is-system-running", check=False).stdout.strip()
        if state in ("running", "degraded"):
            return
        time.sleep(0.5)
    raise RuntimeError(f"systemd in {host.name} did not finish booting (state: {state!r})")


def _prepare(host: TargetHost, platform: Platform) -> None:
    """Make the container look like a fresh server of `platform` with one user.

    A fresh install has apt lists (the base image had them removed to stay
    small) and does not install Recommends on servers built for a purpose.
    A stand-in OS gets its identity files here (tests/ansible/platforms.py).
    """
    for path, content in platform.identity_files.items():
        host.exec("tee", path, stdin=content)
    host.exec("systemctl", "mask", "--now", *MASKED_UNITS, check=False)
    host.exec("sh", "-c", "printf 'APT::Install-Recommends \"false\";\\n' "
              ">/etc/apt/apt.conf.d/90-no-recommends")
    host.exec("apt-get", "update", "-qq")
    host.exec("useradd", "--create-home", "--shell", "/bin/bash", TEST_USER)
    host.exec("mkdir", "-p", "/etc/docker")
    host.exec("tee", "/etc/docker/daemon.json", stdin=json.dumps(PREEXISTING_DAEMON_JSON) + "\n")
