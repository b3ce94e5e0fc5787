"""The Vagrantfile: `vagrant validate` passes, and Vagrant resolves the GPUs as configured.

These are the fast checks: Vagrant with the vagrant-libvirt plugin loads the real
Vagrantfile, so the PCI host devices, CPU mode and provisioners below are exactly
what `vagrant up` would use, and every bad setting stops it with one line (GPUs
that are missing or not on vfio-pci only at `vagrant up`, before libvirt is
asked for anything). The real `vagrant up` runs in test_vagrant_up.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "vagrant" / "gpus.example.yml"
HELPER = Path(__file__).with_name("vagrant_config.rb")


@pytest.fixture
def vagrant_env(tmp_path: Path) -> dict[str, str]:
    """Vagrant's state goes to tmp_path, not into the repository or ~/.vagrant.d."""
    if shutil.which("vagrant") is None:
        pytest.fail("vagrant is missing: apt-get install -y vagrant vagrant-libvirt")
    env = {key: value for key, value in os.environ.items() if not key.startswith("TFHOST_")}
    env.update(VAGRANT_HOME=str(tmp_path / "vagrant.d"),
               VAGRANT_DOTFILE_PATH=str(tmp_path / "dotfile"),
               VAGRANT_CHECKPOINT_DISABLE="1", VAGRANT_DEFAULT_PROVIDER="libvirt")
    return env


def validate(env: dict[str, str], **overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["vagrant", "validate"], cwd=REPO, env={**env, **overrides},
                          capture_output=True, text=True, timeout=120, check=False)


def resolved(env: dict[str, str], **overrides: str) -> list[dict[str, Any]]:
    done = subprocess.run(["ruby", str(HELPER)], cwd=REPO, env={**env, **overrides},
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    guests: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return guests


def pci(bus: str, slot: str = "0x00", function: str = "0x0") -> dict[str, str]:
    return {"domain": "0x0000", "bus": bus, "slot": slot, "function": function}


def test_validate_passes_with_the_defaults(vagrant_env: dict[str, str]) -> None:
    result = validate(vagrant_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Vagrantfile validated successfully" in result.stdout
    [guest] = resolved(vagrant_env)
    assert guest["name"] == "tfhost-gpu1" and guest["pcis"] == []
    # Without GPUs the guest is provisioned as a GPU-less host instead of failing.
    assert "nvidia_driver_require_gpu=false" in guest["raw_arguments"]
    # The driver role's reboot: a connection open across it ends by keepalive, not never.
    assert "-o ServerAliveInterval=5" in guest["raw_ssh_args"]
    assert "-o ServerAliveCountMax=6" in guest["raw_ssh_args"]


def test_example_config_passes_the_seeds_four_p100s(vagrant_env: dict[str, str]) -> None:
    result = validate(vagrant_env, TFHOST_VAGRANT_CONFIG=str(EXAMPLE))
    assert result.returncode == 0, result.stdout + result.stderr
    [guest] = resolved(vagrant_env, TFHOST_VAGRANT_CONFIG=str(EXAMPLE))
    assert guest["pcis"] == [pci("0x18"), pci("0x3b"), pci("0x86"), pci("0xaf")]
    assert guest["cpu_mode"] == "host-passthrough"
    assert guest["kvm_hidden"] is True
    assert guest["machine_type"] == "q35"
    assert (guest["memory"], guest["cpus"]) == (131072, 24)
    assert guest["box"] == "tfhost/debian12"
    assert guest["playbook"] == str(REPO / "ansible" / "site.yml")
    assert guest["groups"] == {"gpu_hosts": ["tfhost-gpu1"]}
    assert "nvidia_driver_require_gpu=false" not in guest["raw_arguments"]


def test_environment_overrides_gpus_memory_and_cpus(vagrant_env: dict[str, str]) -> None:
    overrides = {"TFHOST_VAGRANT_CONFIG": str(EXAMPLE), "TFHOST_GPUS": "0000:65:00.0, 65:00.1",
                 "TFHOST_VM_MEMORY": "8192", "TFHOST_VM_CPUS": "4"}
    assert validate(vagrant_env, **overrides).returncode == 0
    [guest] = resolved(vagrant_env, **overrides)
    assert guest["pcis"] == [pci("0x65"), pci("0x65", function="0x1")]
    assert (guest["memory"], guest["cpus"]) == (8192, 4)


def test_gpus_can_be_assigned_per_guest(vagrant_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "two.yml"
    config.write_text("guests:\n  - name: left\n  - name: right\n    cpus: 2\n")
    overrides = {"TFHOST_VAGRANT_CONFIG": str(config),
                 "TFHOST_GPUS": "left=0000:18:00.0;right=0000:3b:00.0,0000:3b:00.1"}
    assert validate(vagrant_env, **overrides).returncode == 0
    left, right = resolved(vagrant_env, **overrides)
    assert (left["name"], left["pcis"]) == ("left", [pci("0x18")])
    assert right["pcis"] == [pci("0x3b"), pci("0x3b", function="0x1")]
    assert right["cpus"] == 2 and left["cpus"] == 8
    assert left["groups"] == {"gpu_hosts": ["left", "right"]}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TFHOST_GPUS": "0000:65:00"}, "'0000:65:00' is not a PCI address"),
        ({"TFHOST_GPUS": "gpu9=0000:65:00.0"}, "TFHOST_GPUS names gpu9, but the guests are"),
        ({"TFHOST_VM_MEMORY": "lots"}, "'lots' is not a positive whole number"),
        ({"TFHOST_VAGRANT_CONFIG": "/nonexistent/gpus.yml"},
         "/nonexistent/gpus.yml does not exist"),
    ],
)
def test_bad_settings_fail_validate_with_one_line(vagrant_env: dict[str, str],
                                                  overrides: dict[str, str], message: str) -> None:
    result = validate(vagrant_env, **overrides)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Vagrantfile: ") and message in lines[0], lines


def test_one_gpu_cannot_go_to_two_guests(vagrant_env: dict[str, str], tmp_path: Path) -> None:
    config = tmp_path / "clash.yml"
    config.write_text('guests:\n  - {name: a, gpus: ["18:00.0"]}\n'
                      '  - {name: b, gpus: ["0000:18:00.0"]}\n')
    result = validate(vagrant_env, TFHOST_VAGRANT_CONFIG=str(config))
    assert result.returncode != 0
    assert "0000:18:00.0 is given to more than one guest" in result.stderr


def test_qemu_driver_emulates_the_cpu_instead_of_passing_it_through(
        vagrant_env: dict[str, str]) -> None:
    # CI's /dev/kvm (nested PVM) cannot boot the guest: TFHOST_VM_DRIVER=qemu is TCG.
    assert validate(vagrant_env, TFHOST_VM_DRIVER="qemu").returncode == 0
    [guest] = resolved(vagrant_env, TFHOST_VM_DRIVER="qemu")
    assert (guest["driver"], guest["cpu_mode"], guest["kvm_hidden"]) == ("qemu", "maximum", False)
    [default] = resolved(vagrant_env)
    assert (default["driver"], default["cpu_mode"]) == ("kvm", "host-passthrough")


def test_apt_proxy_and_extra_vars_reach_the_provisioners(vagrant_env: dict[str, str],
                                                         tmp_path: Path) -> None:
    extra = tmp_path / "site.yml"
    extra.write_text("docker_users: [vagrant]\n")
    overrides = {"TFHOST_APT_PROXY": "http://192.168.121.1:3142",
                 "TFHOST_ANSIBLE_VARS": str(extra)}
    [guest] = resolved(vagrant_env, **overrides)
    # The proxy is written first, so site.yml's first apt-get already uses it.
    assert guest["provisioners"] == ["shell", "ansible"]
    assert guest["shell_env"] == [{"TFHOST_APT_PROXY": "http://192.168.121.1:3142"}]
    assert f"@{extra}" in guest["raw_arguments"]
    [plain] = resolved(vagrant_env)
    assert plain["provisioners"] == ["ansible"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"TFHOST_VM_DRIVER": "xen"}, "'xen' is not a libvirt domain type; use kvm"),
        ({"TFHOST_ANSIBLE_VARS": "/nonexistent/vars.yml"},
         "/nonexistent/vars.yml does not exist"),
        ({"TFHOST_APT_PROXY": "192.168.121.1:3142"}, "is not an http:// URL"),
    ],
)
def test_bad_overrides_fail_validate_with_one_line(vagrant_env: dict[str, str],
                                                   overrides: dict[str, str], message: str) -> None:
    result = validate(vagrant_env, **overrides)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Vagrantfile: ") and message in lines[0], lines


PCI_DEVICES = Path("/sys/bus/pci/devices")


def up_refused(env: dict[str, str], gpus: str) -> str:
    """`vagrant up` with these GPUs: the one stderr line, after checking libvirt was never asked.

    LIBVIRT_DEFAULT_URI points at a socket that does not exist, so a check that
    came after vagrant-libvirt's first connection would show libvirt's error
    instead of ours; and Vagrant must not have created any machine state. The
    box server is a closed loopback port: a Vagrant that went on to fetch the
    box would fail there, never on the network.
    """
    dotfile = Path(env["VAGRANT_DOTFILE_PATH"])
    result = subprocess.run(
        ["vagrant", "up", "--provider=libvirt"], cwd=REPO, capture_output=True, text=True,
        env={**env, "TFHOST_GPUS": gpus, "VAGRANT_SERVER_URL": "http://127.0.0.1:9",
             "LIBVIRT_DEFAULT_URI": f"qemu:///system?socket={dotfile}/no-libvirt.sock"},
        timeout=120, check=False)
    assert result.returncode != 0, result.stdout
    assert not (dotfile / "machines").exists(), "vagrant up got as far as creating a machine"
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Vagrantfile: "), result.stderr
    return lines[0]


def test_up_refuses_a_gpu_that_is_not_on_this_host(vagrant_env: dict[str, str]) -> None:
    address = next(f"0000:{bus:02x}:1f.7" for bus in range(0xff, 0, -1)
                   if not (PCI_DEVICES / f"0000:{bus:02x}:1f.7").exists())
    line = up_refused(vagrant_env, address)
    assert f"PCI device {address} is not on this host" in line
    assert "vagrant/gpus.yml" in line and "lspci -D" in line
    # validate is not up: a config written for the GPU host still validates elsewhere.
    assert validate(vagrant_env, TFHOST_GPUS=address).returncode == 0


def test_up_refuses_a_gpu_bound_to_another_driver(vagrant_env: dict[str, str]) -> None:
    bound = sorted((device.name, (device / "driver").resolve().name)
                   for device in PCI_DEVICES.glob("*")
                   if (device / "driver").is_symlink()
                   and (device / "driver").resolve().name != "vfio-pci")
    if not bound:
        pytest.skip("this machine has no PCI device bound to a driver other than vfio-pci")
    address, driver = bound[0]
    line = up_refused(vagrant_env, address)
    assert f"PCI device {address} is bound to driver {driver}, not vfio-pci" in line
    assert "hypervisor.yml" in line
