"""A real VM from the project's box: boot, converge site.yml over SSH, run tests/infra.

The guest is the box from scripts/build-box.sh, booted by scripts/vm.sh behind
QEMU's user-mode network with restrict=on: the only way in is
ssh to 127.0.0.1:PORT, and the guest can reach nothing by itself. What it
needs from the host is carried back over Ansible's own SSH connections
(`ssh -R 127.0.0.1:P:127.0.0.1:P`), so the guest sees the same loopback URLs
the container test uses:

* the stub NVIDIA repositories and the fake nvcr.io (tests/fixtures/aptrepo,
  tests/ansible/fake_registry.py), and
* an apt proxy that forwards to deb.debian.org only (tests/vm/apt_proxy.py).

Unlike the container, the VM has its own kernel: the driver role installs the
headers for it and really reboots the guest (nvidia_driver_reboot: true), and
the GPU steps meet a machine without a GPU exactly as on a GPU-less host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.ansible.fake_registry import FakeRegistry, fake_registry
from tests.ansible.lab import CONTAINER_VARS
from tests.ansible.playbook import EXAMPLE_NGC_API_KEY, REPO, PlaybookRun, run_playbook
from tests.ansible.target import PREEXISTING_DAEMON_JSON, TEST_USER
from tests.fixtures.aptrepo import build_stub_repos, serve_directory
from tests.support.background import BackgroundJobs, JobContext, background_job
from tests.vm.apt_proxy import AptProxy, apt_proxy
from tests.vm.box_fixture import require_box
from tests.vm.machine import Box, Machine, booted, stop_vm

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3000)]

APT_CACHE = Path(os.environ.get("TFHOST_BOX_CACHE", "/var/cache/tfhost-box")) / "apt-proxy"

# The container's variables, less what only a container needs: the VM runs a
# Debian kernel with headers in Debian's archive, and it can reboot.
VM_VARS = {key: value for key, value in CONTAINER_VARS.items()
           if key != "nvidia_driver_kernel_headers_packages"}
VM_VARS["nvidia_driver_reboot"] = True


@dataclass(frozen=True)
class Services:
    """Host-side services on 127.0.0.1 that the guest reaches through `ssh -R`."""

    proxy: AptProxy
    registry: FakeRegistry
    variables: dict[str, object]
    ports: list[int]


@dataclass(frozen=True)
class FirstBoot:
    """The guest as it came up from the box, read before anything else ran on it."""

    root_uid: str
    hostname: str
    system_state: str
    failed_units: str
    machine_id: str
    ssh_keys: list[str]


@dataclass(frozen=True)
class Converged:
    box: Box
    machine: Machine
    services: Services
    first_boot: FirstBoot
    run: PlaybookRun
    vars_file: Path
    boot_id_before: str
    workdir: Path


def _first_boot(machine: Machine) -> FirstBoot:
    state = machine.run("systemctl is-system-running --wait", check=False).stdout.strip()
    return FirstBoot(
        root_uid=machine.run("sudo -n id -u").stdout.strip(),
        hostname=machine.run("hostname").stdout.strip(),
        system_state=state,
        failed_units=machine.run("systemctl --failed", check=False).stdout,
        machine_id=machine.run("cat /etc/machine-id").stdout.strip(),
        ssh_keys=machine.run("ls /etc/ssh/").stdout.split(),
    )


@contextmanager
def _services(workdir: Path) -> Iterator[Services]:
    repos = build_stub_repos(workdir / "repos")
    with serve_directory(repos.root, workdir / "repo-http.log") as base_url, \
            fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY) as registry, \
            apt_proxy(APT_CACHE, workdir / "apt-proxy.log") as proxy:
        ports = [proxy.port, urlsplit(base_url).port or 80, int(registry.address.split(":")[1])]
        variables = {**repos.ansible_vars(base_url), **VM_VARS, "ngc_registry": registry.address}
        yield Services(proxy, registry, variables, ports)


def _prepare(machine: Machine, proxy: AptProxy) -> None:
    """What the container test's _prepare does, plus the apt proxy: a fresh server with one user."""
    machine.write_root_file("/etc/apt/apt.conf.d/01tfhost-proxy", proxy.apt_config())
    machine.write_root_file("/etc/apt/apt.conf.d/90-no-recommends",
                            'APT::Install-Recommends "false";\n')
    # The disk is a throwaway overlay (cache=unsafe): dpkg's fsync after every file
    # only costs time here, a lot of it under software emulation.
    machine.write_root_file("/etc/dpkg/dpkg.cfg.d/90-unsafe-io", "force-unsafe-io\n")
    # A fresh server has package lists; any index that cannot be fetched is an error here.
    machine.run("sudo apt-get update -qq --error-on=any", timeout=600,
                reverse_ports=[proxy.port])
    machine.run(f"sudo useradd --create-home --shell /bin/bash {TEST_USER}")
    # A daemon.json the site had before Ansible ran: the roles must keep its keys.
    machine.write_root_file("/etc/docker/daemon.json", json.dumps(PREEXISTING_DAEMON_JSON) + "\n")


@background_job(__file__, name="vm-site")
def boot_and_converge(job: JobContext) -> Converged:
    """Boot the box, prepare it like a fresh server and converge site.yml in it.

    A background job (tests/support/background.py): it starts after collection
    and runs beside the other tests; the fixture below collects its result.
    """
    box = require_box()
    services = job.stack.enter_context(_services(job.workdir))
    state = job.workdir / "state"
    job.on_cancel(lambda: stop_vm(state))
    machine = job.stack.enter_context(booted(box, state, "--memory", "3072"))
    first_boot = _first_boot(machine)  # before _prepare and site.yml change anything
    _prepare(machine, services.proxy)
    boot_id = machine.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    vars_file = job.workdir / "vm-vars.yml"
    vars_file.write_text(yaml.safe_dump(services.variables, sort_keys=True))
    inventory = machine.inventory(job.workdir / "inventory.yml", services.ports)
    run = run_playbook(inventory, [vars_file], job.workdir / "converge.log", timeout=2400)
    return Converged(box, machine, services, first_boot, run, vars_file, boot_id, job.workdir)


@pytest.fixture(scope="module")
def converged(background_jobs: BackgroundJobs) -> Iterator[Converged]:
    with background_jobs.held("vm-site") as converged:  # the guest stops with this module
        yield converged


@pytest.fixture(scope="module")
def machine(converged: Converged) -> Machine:
    return converged.machine


@pytest.fixture(scope="module")
def services(converged: Converged) -> Services:
    return converged.services


@pytest.fixture(scope="module")
def workdir(converged: Converged) -> Path:
    return converged.workdir


def test_guest_boots_and_vagrant_has_passwordless_sudo(converged: Converged) -> None:
    boot = converged.first_boot
    assert boot.root_uid == "0"
    assert boot.hostname == "tfhost-vm"
    assert boot.system_state == "running", boot.failed_units
    assert "Linux version" in converged.machine.console(), "the serial console log is empty"


def test_guest_has_its_own_identity(converged: Converged) -> None:
    assert len(converged.first_boot.machine_id) == 32
    assert "ssh_host_ed25519_key" in converged.first_boot.ssh_keys


def _listening_sockets(pid: int) -> list[str]:
    lines = subprocess.run(["ss", "-Hltnup"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    return [line.split()[4] for line in lines if f"pid={pid}," in line]


def test_guest_is_reachable_only_on_loopback(machine: Machine, services: Services) -> None:
    pid = int((machine.state / "qemu.pid").read_text())
    assert _listening_sockets(pid) == [f"127.0.0.1:{machine.ssh_port}"]
    cmdline = (machine.state / "qemu.cmdline").read_text()
    assert "restrict=on" in cmdline
    # QEMU's user network would map 10.0.2.2 to the host's loopback; restrict=on
    # must refuse it even for a port that is really listening there.
    probe = machine.run(f"timeout 5 bash -c 'echo > /dev/tcp/10.0.2.2/{services.proxy.port}'",
                        check=False)
    assert probe.returncode != 0


def test_site_converges(converged: Converged) -> None:
    run = converged.run
    assert run.returncode == 0, run.explain()
    assert run.recap["failed"] == 0 and run.recap["unreachable"] == 0
    assert run.recap["changed"] > 0
    print(f"site.yml converge in the VM ({converged.machine.accel}): {run.seconds:.0f} s")


def test_driver_install_rebooted_the_guest(converged: Converged) -> None:
    assert converged.run.returncode == 0, "converge failed; see test_site_converges"
    handler = "RUNNING HANDLER [nvidia_driver : Reboot to load the NVIDIA driver]"
    assert handler in converged.run.output
    boot_id = converged.machine.run("cat /proc/sys/kernel/random/boot_id").stdout.strip()
    assert boot_id != converged.boot_id_before


def test_gpu_steps_met_a_host_without_gpu(converged: Converged) -> None:
    assert converged.run.returncode == 0, "converge failed; see test_site_converges"
    smi = converged.machine.run("nvidia-smi -L", check=False)
    assert "No devices were found" in smi.stdout + smi.stderr
    assert "no GPU present" in converged.run.output


def test_apt_went_only_to_debians_mirror(converged: Converged, services: Services) -> None:
    assert services.proxy.log.requests > 0, "the guest's apt never used the proxy"
    assert services.proxy.log.refused == []


def test_testinfra_suite_passes_over_ssh(converged: Converged, workdir: Path) -> None:
    assert converged.run.returncode == 0, "converge failed; see test_site_converges"
    hosts = converged.machine.testinfra_hosts(workdir / "ssh_config")
    env = {**os.environ, "TFHOST_NGC_API_KEY": EXAMPLE_NGC_API_KEY}
    started = time.monotonic()
    try:
        suite = subprocess.run(
            [sys.executable, "-m", "pytest", "tests/infra", *hosts, "--tfhost-vars",
             str(converged.vars_file), "-p", "no:cacheprovider", "-q", "-rs"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False,
        )
    finally:
        # Stop the shared SSH master testinfra's connections used.
        subprocess.run(["ssh", "-F", str(workdir / "ssh_config"), "-O", "exit", "tfhost-vm"],
                       capture_output=True, timeout=30, check=False)
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    summary = suite.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
    assert "no NVIDIA GPU on the target host" in suite.stdout, "GPU tests should skip here"
    print(f"tests/infra over SSH: {time.monotonic() - started:.0f} s, {summary}")
