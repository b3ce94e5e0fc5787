"""Drive scripts/build-box.sh and scripts/vm.sh from the tests.

Why wrappers around the scripts instead of QEMU calls here: the scripts are
what a person runs (docs/gpu-passthrough.md), so the tests exercise exactly them. This module
only adds what a test needs on top: a context manager that always stops the
VM, an SSH runner that returns results, an Ansible inventory for the guest.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# QEMU's hostfwd accepts a TCP connection even while the guest is down or
# rebooting, and a guest that vanishes mid-session never closes it: only SSH
# keepalives (which also run during key exchange) end such a connection, so
# Ansible's reboot handler retries instead of waiting forever.
SSH_OPTIONS = [
    "StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null", "IdentitiesOnly=yes",
    "LogLevel=ERROR", "ConnectTimeout=10", "ServerAliveInterval=5", "ServerAliveCountMax=6",
]
BUILD_BOX = REPO / "scripts" / "build-box.sh"
VM = REPO / "scripts" / "vm.sh"
# Background jobs (tests/support/background.py) and fixtures may ask for the box
# at the same moment: one builds it, the other then finds it in the cache.
_BOX_LOCK = threading.Lock()


@dataclass(frozen=True)
class Box:
    """A built box folder (see scripts/build-box.sh for its contents)."""

    path: Path

    @property
    def disk(self) -> Path:
        return self.path / "disk.qcow2"

    @property
    def key(self) -> Path:
        return self.path / "vagrant_key"

    @property
    def vagrant_box(self) -> Path:
        return self.path / "tfhost-debian12.box"

    @property
    def manifest(self) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.path / "manifest.json").read_text())
        return data


def build_box(timeout: float = 900) -> Box:
    """Build the box, or find it in the cache; fails with the script's own last lines."""
    with _BOX_LOCK:
        result = subprocess.run([str(BUILD_BOX)], capture_output=True, text=True,
                                timeout=timeout, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"build-box.sh failed (rc {result.returncode}):\n"
                           f"{result.stderr[-3000:]}")
    return Box(Path(result.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class Machine:
    """A booted guest, reached as user vagrant on 127.0.0.1:ssh_port."""

    state: Path
    key: Path
    ssh_port: int
    accel: str

    def ssh_args(self, reverse_ports: list[int] | None = None) -> list[str]:
        options = [part for option in ["BatchMode=yes", *SSH_OPTIONS] for part in ("-o", option)]
        forwards = [part for port in reverse_ports or []
                    for part in ("-R", f"127.0.0.1:{port}:127.0.0.1:{port}")]
        return ["ssh", "-i", str(self.key), "-p", str(self.ssh_port), *options, *forwards,
                "vagrant@127.0.0.1"]

    def run(self, command: str, check: bool = True, timeout: float = 300,
            stdin: str | None = None,
            reverse_ports: list[int] | None = None) -> subprocess.CompletedProcess[str]:
        """Run a shell command in the guest as vagrant (prefix with sudo for root).

        reverse_ports: host loopback ports the command reaches on the guest's 127.0.0.1.
        """
        result = subprocess.run([*self.ssh_args(reverse_ports), command], input=stdin,
                                capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"`{command}` in the VM failed (rc {result.returncode}):\n"
                                 f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        return result

    def write_root_file(self, path: str, content: str) -> None:
        self.run(f"sudo install -D -m 0644 /dev/stdin {shlex.quote(path)}", stdin=content)

    def console(self) -> str:
        log = self.state / "console.log"
        return log.read_text(errors="replace") if log.exists() else ""

    def inventory(self, path: Path, reverse_ports: list[int], group: str = "gpu_hosts") -> Path:
        """An Ansible inventory for this guest.

        reverse_ports are host loopback ports the guest must reach on its own
        127.0.0.1 (apt proxy, stub repositories, fake registry): every SSH
        connection Ansible opens carries them with `-R`, so they come back
        after a reboot together with the connection.
        """
        forwards = " ".join(f"-R 127.0.0.1:{port}:127.0.0.1:{port}" for port in reverse_ports)
        host = {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.ssh_port,
            "ansible_user": "vagrant",
            "ansible_become": True,
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": " ".join(f"-o {option}" for option in SSH_OPTIONS),
            "ansible_ssh_extra_args": forwards,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        inventory = {"all": {"children": {group: {"hosts": {"tfhost-vm": host}}}}}
        path.write_text(yaml.safe_dump(inventory, sort_keys=False))
        return path

    def testinfra_hosts(self, ssh_config: Path) -> list[str]:
        """pytest options that point testinfra's SSH backend at this guest.

        testinfra runs one ssh per command; a shared master connection saves
        the handshake each time (seconds under software emulation).
        """
        ssh_config.write_text(
            "Host tfhost-vm\n"
            "  HostName 127.0.0.1\n"
            f"  Port {self.ssh_port}\n"
            "  User vagrant\n"
            f"  IdentityFile {self.key}\n"
            "  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n"
            "  UserKnownHostsFile /dev/null\n"
            "  LogLevel ERROR\n"
            "  ServerAliveInterval 5\n"
            "  ServerAliveCountMax 6\n"
            "  ControlMaster auto\n"
            f"  ControlPath {ssh_config.parent}/cm-%C\n"
            "  ControlPersist 30\n"
        )
        return ["--hosts=ssh://tfhost-vm", f"--ssh-config={ssh_config}", "--sudo"]


def _vm(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(VM), *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


@contextmanager
def booted(box: Box, state: Path, *extra: str, boot_timeout: int = 420) -> Iterator[Machine]:
    """Boot the box (fresh overlay in `state`), wait for SSH, always stop it afterwards."""
    started = _vm("start", "--disk", str(box.disk), "--key", str(box.key), "--state", str(state),
                  *extra)
    if started.returncode != 0:
        raise RuntimeError(f"vm.sh start failed:\n{started.stderr[-3000:]}")
    fields = dict(item.split("=", 1) for item in started.stdout.split())
    machine = Machine(state, box.key, int(fields["ssh_port"]), fields["accel"])
    try:
        waited = _vm("wait-ssh", "--state", str(state), "--timeout", str(boot_timeout),
                     timeout=boot_timeout + 30)
        if waited.returncode != 0:
            raise RuntimeError(f"the VM did not answer on SSH:\n{waited.stderr[-2000:]}\n"
                               f"console:\n{machine.console()[-3000:]}")
        yield machine
    finally:
        stop_vm(state)


def stop_vm(state: Path) -> None:
    """Stop the guest whose state folder is `state` (nothing happens if it is already down)."""
    _vm("stop", "--state", str(state), "--timeout", "60", timeout=120)
