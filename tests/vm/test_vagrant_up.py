"""`vagrant up` for real: the Vagrantfile boots, provisions site.yml and passes tests/infra.

The commands are docs/gpu-passthrough.md's ("3. The guests"):

    vagrant box add --name tfhost/debian12 <box folder>/tfhost-debian12.box
    vagrant up --provider=libvirt
    pytest tests/infra --hosts=ssh://tfhost-gpu1 --ssh-config=<vagrant ssh-config> ...
    vagrant provision            # again: nothing changes
    vagrant destroy -f

run inside a network namespace this test creates (tests/vm/netns.py), where
libvirtd puts vagrant-libvirt's 192.168.121.0/24 bridge; nothing is on the
machine's own network. What CI cannot have comes through the Vagrantfile's own
settings, never a copy of it: no GPUs (the default), TFHOST_VM_DRIVER=qemu
where /dev/kvm cannot boot the guest, TFHOST_VM_MEMORY/CPUS sized for CI,
TFHOST_APT_PROXY for the loopback apt proxy (tests/vm/apt_proxy.py, to
deb.debian.org only) and TFHOST_ANSIBLE_VARS for the stub NVIDIA repositories
and fake nvcr.io. Those services listen on the host's loopback; netns.py relays
them onto the namespace's loopback and Ansible's SSH carries them on to the
guest's (`-R`), so the guest uses the same 127.0.0.1 URLs as the container test.

Unlike the container, the guest has its own kernel: the driver role installs the
headers for it and really reboots it, and the GPU steps meet a machine without a
GPU exactly as on a GPU-less host. It replaced tests/vm/test_vm_site.py (site.yml
in a guest that scripts/vm.sh booted, converged by hand), whose box and
loopback checks went to tests/hypervisor/test_vm_hypervisor.py. The slow part
(box add, up, tests/infra, provision again) is a background job that starts
after collection (tests/support/background.py), and this module's tests run
after every other test of the session, so the job has the whole session to
finish.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.ansible.fake_registry import fake_registry
from tests.ansible.lab import CONTAINER_VARS
from tests.ansible.playbook import EXAMPLE_NGC_API_KEY, REPO, VAULT_PASSWORD
from tests.ansible.timings import record_timing
from tests.fixtures.aptrepo import build_stub_repos, serve_directory
from tests.support.background import BackgroundJobs, JobContext, background_job
from tests.vm.apt_proxy import AptProxy, apt_proxy
from tests.vm.box_fixture import require_box
from tests.vm.emulation import SKIP_REASON, domain_type, emulated_guests_skipped
from tests.vm.machine import Box
from tests.vm.netns import Namespace, destroy_domains, libvirt_namespace, relay_ports

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600),
              pytest.mark.skipif(emulated_guests_skipped(), reason=SKIP_REASON)]

APT_CACHE = Path(os.environ.get("TFHOST_BOX_CACHE", "/var/cache/tfhost-box")) / "apt-proxy"
GUEST = "tfhost-gpu1"
BIN = Path(sys.executable).parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
RECAP = re.compile(r"^\S+\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                   re.MULTILINE)
# Debian packages this test drives beyond the box's (scripts/install-test-deps.sh).
TOOLS = {"vagrant": "vagrant", "libvirtd": "libvirt-daemon-system", "virsh": "libvirt-clients",
         "dnsmasq": "dnsmasq-base", "iptables": "iptables", "unshare": "util-linux",
         "nsenter": "util-linux"}

# The container's variables, less what only a container needs: the VM runs a
# Debian kernel with headers in Debian's archive, and it can reboot. The box's
# user is the one that gets Docker and the NGC login.
VM_VARS = {key: value for key, value in CONTAINER_VARS.items()
           if key != "nvidia_driver_kernel_headers_packages"}
VM_VARS.update(nvidia_driver_reboot=True, docker_users=["vagrant"], ngc_users=["root", "vagrant"])


@dataclass
class Step:
    """One Vagrant command's result; its time goes to docs/development.md."""

    returncode: int
    output: str
    seconds: float

    def recap(self) -> dict[str, int]:
        match = RECAP.search(self.output)
        assert match, f"no PLAY RECAP in the output:\n{self.output[-3000:]}"
        ok, changed, unreachable, failed = (int(value) for value in match.groups())
        return {"ok": ok, "changed": changed, "unreachable": unreachable, "failed": failed}


@dataclass
class Lab:
    """The namespace with libvirt, the environment Vagrant runs with, and the step times."""

    namespace: Namespace
    env: dict[str, str]
    workdir: Path
    proxy: AptProxy
    vars_file: Path
    times: dict[str, float] = field(default_factory=dict)
    steps: dict[str, Step] = field(default_factory=dict)

    def vagrant(self, name: str, *args: str, timeout: float = 600) -> Step:
        """Run `vagrant ARGS` in the namespace; the output goes to NAME.log as it comes."""
        log = self.workdir / f"{name}.log"
        started = time.monotonic()
        with log.open("w") as stream:
            done = subprocess.run(self.namespace.command(["vagrant", *args], cwd=REPO),
                                  stdout=stream, stderr=subprocess.STDOUT, env=self.env,
                                  timeout=timeout, check=False)
        step = Step(done.returncode, ANSI.sub("", log.read_text(errors="replace")),
                    time.monotonic() - started)
        self.times[name] = round(step.seconds, 1)
        self.steps[name] = step
        return step


@contextmanager
def _lab(box: Box, workdir: Path) -> Iterator[Lab]:
    """The namespace with libvirtd, the loopback services relayed into it, Vagrant's environment."""
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        pytest.fail(f"missing tools for the vagrant test; apt-get install -y {' '.join(missing)}")
    repos = build_stub_repos(workdir / "repos")
    with serve_directory(repos.root, workdir / "repo-http.log") as base_url, \
            fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY) as registry, \
            apt_proxy(APT_CACHE, workdir / "apt-proxy.log") as proxy, \
            libvirt_namespace(workdir / "libvirt", hide_kvm=domain_type() == "qemu") as namespace:
        ports = [proxy.port, urlsplit(base_url).port or 80, int(registry.address.split(":")[1])]
        forwards = " ".join(f"-R 127.0.0.1:{port}:127.0.0.1:{port}" for port in ports)
        variables = {**repos.ansible_vars(base_url), **VM_VARS, "ngc_registry": registry.address,
                     # Every SSH connection Ansible opens carries the services to the
                     # guest's loopback, so they come back after the reboot too.
                     "ansible_ssh_extra_args": forwards}
        vars_file = workdir / "vm-vars.yml"
        vars_file.write_text(yaml.safe_dump(variables, sort_keys=True))
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("TFHOST_", "VAGRANT_", "ANSIBLE_"))}
        env.update(
            PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
            VAGRANT_HOME=str(workdir / "vagrant.d"), VAGRANT_DOTFILE_PATH=str(workdir / "dotfile"),
            VAGRANT_CHECKPOINT_DISABLE="1",
            # Each task's start time and duration in up.log and provision.log: where the
            # guest's half hour under TCG goes (docs/development.md).
            ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
            # One emulated CPU: under TCG each vCPU is a host thread, and with two the
            # guest took 1.2-1.5 of CI's two cores for half an hour (measured), leaving
            # the other tests less than one. The module runs last (run_last), so a
            # slower guest never makes the session wait.
            TFHOST_VM_DRIVER=domain_type(), TFHOST_VM_MEMORY="3072", TFHOST_VM_CPUS="1",
            TFHOST_APT_PROXY=f"http://127.0.0.1:{proxy.port}/",
            TFHOST_ANSIBLE_VARS=str(vars_file),
            TFHOST_VAULT_PASSWORD_FILE=str(VAULT_PASSWORD),
        )
        with relay_ports(namespace, ports):
            lab = Lab(namespace, env, workdir, proxy, vars_file)
            try:
                yield lab
            finally:
                if "destroy" not in lab.steps:
                    lab.vagrant("destroy", "destroy", "-f", timeout=300)
                (workdir / "times.json").write_text(json.dumps(lab.times, indent=1))


def _testinfra(lab: Lab) -> Step:
    """tests/infra through `vagrant ssh-config`, as docs/gpu-passthrough.md tells a user."""
    config = lab.vagrant("ssh-config", "ssh-config", GUEST)
    if config.returncode != 0:
        return config
    ssh_config = lab.workdir / "ssh_config"
    # testinfra runs one ssh per command: a shared master saves the handshakes.
    ssh_config.write_text(config.output + f"  ControlMaster auto\n"
                          f"  ControlPath {lab.workdir}/cm-%C\n  ControlPersist 30\n")
    started = time.monotonic()
    env = {**lab.env, "TFHOST_NGC_API_KEY": EXAMPLE_NGC_API_KEY}
    try:
        suite = lab.namespace.run(
            [sys.executable, "-m", "pytest", "tests/infra", f"--hosts=ssh://{GUEST}",
             f"--ssh-config={ssh_config}", "--sudo", "--tfhost-vars", str(lab.vars_file),
             "-p", "no:cacheprovider", "-q", "-rs"],
            cwd=REPO, env=env, timeout=900, check=False)
    finally:
        lab.namespace.run(["ssh", "-F", str(ssh_config), "-O", "exit", GUEST], check=False)
    # The summary is stdout's last line; stderr only matters when the suite failed.
    output = suite.stdout if suite.returncode == 0 else suite.stdout + suite.stderr[-2000:]
    step = Step(suite.returncode, output, time.monotonic() - started)
    lab.times["tests/infra"] = round(step.seconds, 1)
    return step


@dataclass(frozen=True)
class Provisioned:
    """What the background job did: `vagrant up`, then tests/infra and `vagrant provision`."""

    lab: Lab
    up: Step
    infra: Step | None
    again: Step | None


@background_job(__file__, name="vagrant-up", run_last=True)
def up_check_and_provision_again(job: JobContext) -> Provisioned:
    """`vagrant box add`, `vagrant up`, tests/infra, `vagrant provision`: the slow part.

    A background job (tests/support/background.py): it starts after collection
    and runs beside the other tests; the tests below check what it recorded, and
    the last of them destroys the guest.
    """
    box = require_box()
    lab = job.stack.enter_context(_lab(box, job.workdir))
    job.on_cancel(lambda: destroy_domains(lab.namespace))
    added = lab.vagrant("box-add", "box", "add", "--name", "tfhost/debian12",
                        str(box.vagrant_box))
    assert added.returncode == 0, added.output[-3000:]
    up = lab.vagrant("up", "up", "--provider=libvirt", timeout=3000)
    if up.returncode != 0:
        return Provisioned(lab, up, None, None)
    infra = _testinfra(lab)
    again = lab.vagrant("provision", "provision", timeout=1800)
    return Provisioned(lab, up, infra, again)


@pytest.fixture(scope="module")
def provisioned(background_jobs: BackgroundJobs) -> Iterator[Provisioned]:
    try:
        # Leaving destroys the guest if the tests did not, and stops libvirtd.
        with background_jobs.held("vagrant-up") as provisioned:
            yield provisioned
    finally:
        done = background_jobs.handle("vagrant-up").value
        if done is not None:
            print(f"\nvagrant steps (s): {json.dumps(done.lab.times)}")
            # Kept with the play timings (results/ansible-timings.json): the guest's steps set
            # how long the background job holds a core.
            for step, seconds in done.lab.times.items():
                record_timing(f"vagrant guest: {step}", seconds)


@pytest.fixture(scope="module")
def lab(provisioned: Provisioned) -> Lab:
    return provisioned.lab


@pytest.fixture(scope="module")
def up(provisioned: Provisioned) -> Step:
    return provisioned.up


def test_vagrant_up_provisions_site_yml(up: Step) -> None:
    assert up.returncode == 0, up.output[-6000:]
    recap = up.recap()
    assert recap["failed"] == 0 and recap["unreachable"] == 0 and recap["changed"] > 0, recap
    # The driver role rebooted the guest, and the GPU steps met a host without a GPU.
    assert "RUNNING HANDLER [nvidia_driver : Reboot to load the NVIDIA driver]" in up.output
    assert "no GPU present" in up.output


def test_the_bridge_lives_only_in_the_namespace(lab: Lab, up: Step) -> None:
    inside = lab.namespace.run(["ip", "-4", "-br", "addr"]).stdout
    outside = subprocess.run(["ip", "-4", "-br", "addr"], capture_output=True, text=True,
                             check=True).stdout
    assert "192.168.121.1/24" in inside
    assert "192.168.121." not in outside


def test_guest_is_the_vagrantfiles_domain(lab: Lab, up: Step) -> None:
    assert up.returncode == 0, "vagrant up failed; see test_vagrant_up_provisions_site_yml"
    [domain] = lab.namespace.run(["virsh", "-c", "qemu:///system", "list", "--name"]).stdout.split()
    assert domain.endswith(f"_{GUEST}")
    xml = lab.namespace.run(["virsh", "-c", "qemu:///system", "dumpxml", domain]).stdout
    assert f"<domain type='{lab.env['TFHOST_VM_DRIVER']}'" in xml
    assert "q35" in xml and "<hostdev" not in xml
    ssh = lab.vagrant("ssh-hostname", "ssh", GUEST, "-c", "hostname; sudo -n id -u; "
                      "systemctl is-system-running --wait; cat /etc/machine-id; "
                      "ls /etc/ssh/ssh_host_ed25519_key; nvidia-smi -L 2>&1 || true")
    assert ssh.returncode == 0, ssh.output[-2000:]
    lines = [line.strip() for line in ssh.output.splitlines()]
    assert lines[:3] == [GUEST, "0", "running"], ssh.output
    # The box's first boot gave this guest its own identity (scripts/build-box.sh).
    assert re.fullmatch("[0-9a-f]{32}", lines[3]), ssh.output
    assert lines[4] == "/etc/ssh/ssh_host_ed25519_key", ssh.output
    assert "No devices were found" in ssh.output


def test_apt_went_only_to_debians_mirror(lab: Lab, up: Step) -> None:
    assert lab.proxy.log.requests > 0, "the guest's apt never used the proxy"
    assert lab.proxy.log.refused == []


def test_testinfra_suite_passes_through_vagrant_ssh_config(provisioned: Provisioned) -> None:
    suite = provisioned.infra
    assert suite is not None, "vagrant up failed; see test_vagrant_up_provisions_site_yml"
    assert suite.returncode == 0, suite.output[-8000:]
    summary = suite.output.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
    assert "no NVIDIA GPU on the target host" in suite.output, "GPU tests should skip here"


def test_provision_again_changes_nothing(provisioned: Provisioned) -> None:
    again = provisioned.again
    assert again is not None, "vagrant up failed; see test_vagrant_up_provisions_site_yml"
    assert again.returncode == 0, again.output[-6000:]
    recap = again.recap()
    assert recap["changed"] == 0 and recap["failed"] == 0, recap


def test_destroy_leaves_no_domain(lab: Lab, up: Step) -> None:
    gone = lab.vagrant("destroy", "destroy", "-f", timeout=300)
    assert gone.returncode == 0, gone.output[-3000:]
    domains = lab.namespace.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"])
    assert domains.stdout.split() == []
