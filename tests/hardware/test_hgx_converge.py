"""The CI host "as" an HGX H100: the nvidia_driver role installs, starts and checks Fabric Manager.

A systemd container (tests/ansible/target.py) gets the HGX H100's PCI tree
(tests/hardware/machines.py) at a path the role is pointed at
(nvidia_driver_pci_devices_path), and the nvidia-smi stub is told of the
eight GPUs and of that tree, so it reports the NVLink fabric as the real tool
does: "In Progress" until Fabric Manager runs. Everything else is real: apt
from the signed stub repository, dpkg holds, systemd starting the daemon.
Only the hardware-dependent parts run (--tags nvidia_driver,dcgm and
gpu_validate's DCGM diagnostic): the rest of site.yml does not depend on the
hardware and is converged by tests/ansible.

The host had DCGM 3 before (datacenter-gpu-manager, as NVIDIA's repository built it):
the converge migrates it to DCGM 4 the way NVIDIA's DCGM guide does. Fabric Manager
comes with NSCQ, the library DCGM reads the NVSwitches through, both at the driver's
build and held with it; a Fabric Manager that cannot start fails the play at once
with the last lines of its log.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.lab import CONTAINER_VARS
from tests.ansible.playbook import PlaybookRun, run_playbook, write_inventory
from tests.ansible.target import TargetHost, docker, start_target, target_image
from tests.ansible.timings import record_timing
from tests.fixtures.aptrepo import build_repo, build_stub_repos, serve_directory
from tests.fixtures.aptrepo.catalog import (
    dcgm3_packages,
    driver_packages,
    fabric_manager_packages,
)
from tests.fixtures.aptrepo.debs import build_deb
from tests.fixtures.aptrepo.signing import generate_key
from tests.hardware.hgx import give_machine, run_infra
from tests.hardware.machines import H100_HGX
from tests.support.background import BackgroundJobs, JobContext, background_job
from tests.support.docker_engine import ensure_engine
from tests.support.image_registry import Repository, image_registry, repository_from_image

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(5400)]

# The driver (with Fabric Manager), DCGM, and gpu_validate's DCGM diagnostic.
TAGS = "nvidia_driver,dcgm,gpu_validate_dcgm"
# A limit against a hung run, not a performance bound: DKMS's compiler install
# alone took 12 min on a CI machine shared by several suites (load 25).
PLAY_TIMEOUT = 2400


@dataclass
class HgxRun:
    host: TargetHost
    vars_file: Path
    first: PlaybookRun
    second: PlaybookRun
    repos_root: Path  # served at base_url while the module runs
    base_url: str


@background_job(__file__, name="hgx-converge", run_last=True)
def converge_the_hgx_host(job: JobContext) -> HgxRun:
    """The HGX stand-in's first converge and re-run (minutes): a background job.

    It starts at collection and runs beside the rest of the suite (this module's tests
    run after every other test, `run_last`); the host and the repository's server stay
    up in the job's stack until the module is done. tests/support/background.py.
    """
    ensure_engine()
    workdir = job.workdir
    repos = build_stub_repos(workdir / "repos")
    base_url = job.stack.enter_context(serve_directory(repos.root, workdir / "repo-http.log"))
    host = start_target(target_image(), f"tfhost-hw-hgx-{os.getpid()}")
    job.stack.callback(host.remove)
    job.on_cancel(host.remove)
    devices = give_machine(host, H100_HGX, workdir)
    # DCGM 3 as the host had it before (installed from NVIDIA's repository, running).
    for package in dcgm3_packages():
        deb = build_deb(package, workdir)
        # Not /tmp: systemd mounts a tmpfs there, over what `docker cp` writes.
        docker("cp", str(deb), f"{host.name}:/root/{deb.name}")
        host.exec("dpkg", "-i", f"/root/{deb.name}")
    host.exec("systemctl", "daemon-reload")
    host.exec("systemctl", "enable", "--now", "nvidia-dcgm")
    variables = {**repos.ansible_vars(base_url), **CONTAINER_VARS,
                 # The kernel headers are not what this host is about (test_site.py's converge
                 # installs them); a package already present keeps their install out of it.
                 "nvidia_driver_kernel_headers_packages": ["kmod"],
                 "nvidia_driver_pci_devices_path": devices}
    vars_file = workdir / "hgx-vars.yml"
    vars_file.write_text(yaml.safe_dump(variables))
    inventory = write_inventory(workdir / "hgx.inventory.yml", host.name)
    first = run_playbook(inventory, [vars_file], workdir / "hgx-1.log", "--tags", TAGS,
                         timeout=PLAY_TIMEOUT)
    second = run_playbook(inventory, [vars_file], workdir / "hgx-2.log", "--tags", TAGS,
                          timeout=PLAY_TIMEOUT)
    return HgxRun(host, vars_file, first, second, repos.root, base_url)


@pytest.fixture(scope="module")
def hgx(background_jobs: BackgroundJobs) -> Iterator[HgxRun]:
    with background_jobs.held("hgx-converge") as run:  # the host goes with this module
        yield run


def _said(run: PlaybookRun, text: str) -> bool:
    """Whether the play printed text (the YAML callback wraps long messages)."""
    return " ".join(text.split()) in " ".join(run.output.split())


def _installed(host: TargetHost, *names: str) -> list[str]:
    return host.exec("dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *names,
                     check=False).stdout.split("\n")[:-1]


def test_hgx_converges_with_open_modules_and_fabric_manager(hgx: HgxRun) -> None:
    record_timing("HGX H100 stand-in: driver + DCGM converge", hgx.first.seconds)
    assert hgx.first.returncode == 0, hgx.first.explain()
    assert _said(hgx.first, "8 NVIDIA GPU(s) Hopper, 4 NVSwitch(es): open kernel modules "
                            "(nvidia_driver_kernel_modules: auto), branch 580, Fabric Manager.")
    assert _said(hgx.first, "NVLink fabric initialised on 8 GPU(s): State Completed, "
                            "Status Success")
    assert _installed(hgx.host, "nvidia-fabricmanager", "nvidia-kernel-open-dkms") == [
        "nvidia-fabricmanager 580.126.16-1", "nvidia-kernel-open-dkms 580.126.16-1"]
    # Not an NVLink 5 board: no subnet manager, no ib_umad.
    assert hgx.host.exec("dpkg", "-s", "nvlsm", check=False).returncode != 0
    assert hgx.host.exec("test", "-e", "/etc/modules-load.d/nvidia-fabricmanager.conf",
                         check=False).returncode != 0


def test_nscq_is_the_drivers_build_and_held_with_fabric_manager(hgx: HgxRun) -> None:
    """DCGM's guide requires NSCQ on NVSwitch systems (without it DCGM's NVSwitch fields and
    health checks are empty); it is the driver's build, like Fabric Manager. Before the fix
    the role installed none."""
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    assert _installed(hgx.host, "libnvidia-nscq") == ["libnvidia-nscq 580.126.16-1"]
    held = set(hgx.host.exec("apt-mark", "showhold").stdout.split())
    assert {"libnvidia-nscq", "nvidia-fabricmanager"} <= held, held
    pin = hgx.host.read("/etc/apt/preferences.d/nvidia-cuda-fabricmanager.pref")
    assert "Package: libnvidia-nscq\nPin: version 580.126.16-*" in pin, pin


def test_dcgm_3_was_migrated_to_dcgm_4(hgx: HgxRun) -> None:
    """NVIDIA's DCGM guide: purge datacenter-gpu-manager (and -config) before DCGM 4. Before the
    fix DCGM 4's install failed on the files DCGM 3 owns (dcgmi, nv-hostengine, the unit)."""
    assert hgx.first.returncode == 0, hgx.first.explain()
    for name in ("datacenter-gpu-manager", "datacenter-gpu-manager-config"):
        assert hgx.host.exec("dpkg", "-s", name, check=False).returncode != 0, f"{name} is left"
    assert "version: 4.2.3" in hgx.host.exec("dcgmi", "--version").stdout
    assert hgx.host.exec("systemctl", "is-active", "nvidia-dcgm").stdout.strip() == "active"


def test_hgx_gets_dcgm_and_its_diagnostic_passes(hgx: HgxRun) -> None:
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    # Branch 580's nvidia-smi reports CUDA 13.0: DCGM for CUDA 13.
    assert _installed(hgx.host, "datacenter-gpu-manager-4-cuda13") == [
        "datacenter-gpu-manager-4-cuda13 1:4.2.3-1"]
    # Its Recommends too (the profiling module), as NVIDIA installs it, although this host's
    # apt is set not to (APT::Install-Recommends "false", tests/ansible/target.py).
    assert hgx.host.exec("apt-config", "dump", "APT::Install-Recommends").stdout.strip() \
        == 'APT::Install-Recommends "false";'
    assert _installed(hgx.host, "datacenter-gpu-manager-4-proprietary-cuda13",
                      "datacenter-gpu-manager-4-proprietary") == [
        "datacenter-gpu-manager-4-proprietary 1:4.2.3-1",
        "datacenter-gpu-manager-4-proprietary-cuda13 1:4.2.3-1"]
    assert hgx.host.exec("systemctl", "is-active", "nvidia-dcgm").stdout.strip() == "active"
    assert _said(hgx.first, f"DCGM diagnostic (dcgmi diag -r 1) on {hgx.host.name}: PASS")


def test_fabric_manager_starts_before_the_persistence_daemon(hgx: HgxRun) -> None:
    output = hgx.first.output
    assert output.index("TASK [nvidia_driver : Start Fabric Manager]") \
        < output.index("TASK [nvidia_driver : Start the persistence daemon]")


def test_hgx_rerun_changes_nothing(hgx: HgxRun) -> None:
    assert hgx.second.returncode == 0, hgx.second.explain()
    assert hgx.second.recap["changed"] == 0, hgx.second.explain()


def test_testinfra_fabric_checks_pass_on_the_hgx_host(hgx: HgxRun) -> None:
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    suite = run_infra(hgx.host, [hgx.vars_file], "tests/infra/test_fabric.py",
                      "tests/infra/test_driver.py", "tests/infra/test_dcgm.py",
                      "tests/infra/test_cdi.py")
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    assert "no NVSwitch on this host" not in suite.stdout, "the fabric checks must run here"


# --- The DCGM exporter, on the converged HGX host ---------------------------------------
EXPORTER_NAME = "nvidia/k8s/dcgm-exporter"
EXPORTER_TAG = "4.5.2-4.8.1-ubuntu22.04"  # the role's default tag; the registry is the test's
STANDIN = Path(__file__).parent / "standin" / "dcgm-exporter"


@dataclass
class ExporterContainer:
    """What the host's dockerd and kernel say about the running exporter."""

    inspect: dict[str, Any]
    status: dict[str, str]  # /proc/1/status of the exporter's process, as the kernel sees it

    @property
    def host_config(self) -> dict[str, Any]:
        return dict(self.inspect["HostConfig"])

    @property
    def cap_add(self) -> list[str]:
        return [name.removeprefix("CAP_") for name in self.host_config["CapAdd"] or []]


@dataclass
class ExporterRuns:
    settings: Path  # the last run's exporter variables
    image: str  # REGISTRY/PATH:TAG@sha256:DIGEST on the test's loopback registry
    registry_requests: list[str]
    docker: PlaybookRun
    first: PlaybookRun
    second: PlaybookRun
    moved: PlaybookRun
    ports: tuple[int, int]
    plain: ExporterContainer  # after the second run: the defaults (no profiling)
    profiling: ExporterContainer  # after the moved run: dcgm_exporter_profiling: true
    metrics_first: str
    metrics_moved: str
    old_port_answers: bool
    hook_log: str


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
            return str(answer.read().decode())
    except OSError:
        return ""


def _standin_exporter(workdir: Path) -> Repository:
    """The stand-in built here, saved and made ready to serve under the exporter's NGC path.

    NGC is unreachable: the host's dockerd pulls this one, by digest, from the test's
    registry on 127.0.0.1 (tests/support/image_registry.py), as it would pull NVIDIA's.
    """
    context = workdir / "exporter-image"
    context.mkdir()
    (context / "dcgm-exporter").write_text(STANDIN.read_text())
    (context / "Dockerfile").write_text(
        f"FROM {target_image()}\nCOPY dcgm-exporter /usr/bin/dcgm-exporter\n"
        "RUN chmod 0755 /usr/bin/dcgm-exporter\n"
        'CMD ["/usr/bin/dcgm-exporter"]\n')
    tag = f"tfhost/dcgm-exporter-standin:{os.getpid()}"
    docker("build", "--network", "none", "--tag", tag, str(context), timeout=600)
    try:
        return repository_from_image(tag, EXPORTER_NAME, EXPORTER_TAG, workdir)
    finally:
        docker("rmi", tag, check=False)


def _container(host: TargetHost) -> ExporterContainer:
    inspect = json.loads(host.exec("docker", "inspect", "dcgm-exporter").stdout)[0]
    status = host.exec("cat", f"/proc/{inspect['State']['Pid']}/status").stdout
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    return ExporterContainer(inspect, {key: value.strip() for key, value in fields.items()})


@pytest.fixture(scope="module")
def exporter(hgx: HgxRun, tmp_path_factory: pytest.TempPathFactory) -> ExporterRuns:
    """Docker + the toolkit on the HGX host, then the exporter on, again, and on a new port
    with profiling metrics."""
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    workdir = tmp_path_factory.mktemp("exporter")
    inventory = hgx.vars_file.with_name("hgx.inventory.yml")
    docker_run = run_playbook(inventory, [hgx.vars_file], workdir / "docker.log",
                              "--tags", "docker,nvidia_container_toolkit", timeout=PLAY_TIMEOUT)
    assert docker_run.returncode == 0, docker_run.explain()
    standin = _standin_exporter(workdir)
    ports = (_free_port(), _free_port())
    with image_registry() as registry:
        registry.repositories[EXPORTER_NAME] = standin
        image = registry.reference(EXPORTER_NAME)

        def exporter_run(name: str, port: int, **extra: object) -> PlaybookRun:
            settings = workdir / f"{name}-vars.yml"
            # CI's dockerd has no bridge ("bridge": "none"): the exporter shares the host's
            # network, and listens on the loopback address (the role's default) only.
            settings.write_text(yaml.safe_dump({
                "dcgm_exporter": True, "dcgm_exporter_network": "host",
                "dcgm_exporter_image": image, "dcgm_exporter_port": port, **extra}))
            return run_playbook(inventory, [hgx.vars_file, settings], workdir / f"{name}.log",
                                "--tags", "dcgm", timeout=PLAY_TIMEOUT)

        first = exporter_run("first", ports[0])
        metrics_first = _metrics(ports[0])
        second = exporter_run("second", ports[0])
        plain = _container(hgx.host)
        hook_log = hgx.host.exec("cat", "/var/log/nvidia-stub/runtime-hook.log",
                                 check=False).stdout
        moved = exporter_run("moved", ports[1], dcgm_exporter_profiling=True)
        metrics_moved = _metrics(ports[1])
        profiling = _container(hgx.host) if moved.returncode == 0 else plain
        old_port_answers = bool(_metrics(ports[0]))
        requests = list(registry.requests)
    record_timing("HGX H100 stand-in: Docker + container toolkit", docker_run.seconds)
    record_timing("HGX H100 stand-in: DCGM exporter started", first.seconds)
    return ExporterRuns(workdir / "moved-vars.yml", image, requests, docker_run, first, second,
                        moved, ports, plain, profiling, metrics_first, metrics_moved,
                        old_port_answers, hook_log)


def test_the_exporter_runs_on_the_nvidia_runtime_with_the_gpus(exporter: ExporterRuns) -> None:
    assert exporter.first.returncode == 0, exporter.first.explain()
    host_config = exporter.plain.host_config
    assert host_config["Runtime"] == "nvidia"
    assert host_config["RestartPolicy"]["Name"] == "unless-stopped"
    assert host_config["NetworkMode"] == "host"
    assert [(request["Count"], request["Capabilities"]) for request in
            host_config["DeviceRequests"]] == [(-1, [["gpu"]])]
    # Docker ran the NVIDIA prestart hook for --gpus all (the stub logs each call).
    assert "prestart" in exporter.hook_log


def test_the_exporter_image_is_pulled_by_its_digest(exporter: ExporterRuns) -> None:
    """The pinned reference is what runs, and the registry was asked for the digest,
    never for the tag (which could point anywhere by now)."""
    digest = exporter.image.rsplit("@", 1)[1]
    assert exporter.plain.inspect["Config"]["Image"] == exporter.image
    manifests = [r for r in exporter.registry_requests if "/manifests/" in r]
    assert manifests, exporter.registry_requests
    assert all(r.endswith(f"/manifests/{digest}") for r in manifests), manifests


def test_the_exporter_runs_with_no_capability_read_only_and_unprivileged(
        exporter: ExporterRuns) -> None:
    """The defaults, measured on the running container: Docker's record and the kernel's."""
    host_config, status = exporter.plain.host_config, exporter.plain.status
    assert host_config["CapDrop"] == ["ALL"]
    assert exporter.plain.cap_add == []
    assert host_config["Privileged"] is False
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["SecurityOpt"] == ["no-new-privileges"]
    assert set(host_config["Tmpfs"]) == {"/tmp"}
    assert "noexec" in host_config["Tmpfs"]["/tmp"] and "nosuid" in host_config["Tmpfs"]["/tmp"]
    assert exporter.plain.inspect["Config"]["User"] == "65534:65534"
    # The kernel's view of the exporter process: no capability in any set, no way back to one.
    assert status["Uid"].split()[:2] == ["65534", "65534"]
    assert status["Gid"].split()[:2] == ["65534", "65534"]
    for capability_set in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[capability_set], 16) == 0, (capability_set, status[capability_set])
    assert status["NoNewPrivs"] == "1"
    # And it still serves: nothing more was needed.
    assert "DCGM_FI_DEV_GPU_TEMP{" in exporter.metrics_first


def test_profiling_metrics_add_sys_admin_alone_as_root(exporter: ExporterRuns) -> None:
    """dcgm_exporter_profiling: true: CAP_SYS_ADMIN and nothing else, as root (Docker gives
    a capability to root alone); everything else stays as tight."""
    assert exporter.moved.returncode == 0, exporter.moved.explain()
    host_config, status = exporter.profiling.host_config, exporter.profiling.status
    assert host_config["CapDrop"] == ["ALL"]
    assert exporter.profiling.cap_add == ["SYS_ADMIN"]
    assert host_config["ReadonlyRootfs"] is True
    assert host_config["SecurityOpt"] == ["no-new-privileges"]
    assert exporter.profiling.inspect["Config"]["User"] == "0:0"
    cap_sys_admin = 1 << 21
    for capability_set in ("CapPrm", "CapEff", "CapBnd"):
        assert int(status[capability_set], 16) == cap_sys_admin, (capability_set, status)
    assert status["NoNewPrivs"] == "1"
    assert _said(exporter.moved, "profiling metrics on (root, CAP_SYS_ADMIN)")


def test_the_exporter_serves_metrics_and_the_play_says_so(exporter: ExporterRuns) -> None:
    assert "DCGM_FI_DEV_GPU_TEMP{" in exporter.metrics_first
    assert _said(exporter.first, f"http://127.0.0.1:{exporter.ports[0]}/metrics, 3 DCGM "
                                 "metric(s) (DCGM_FI_DEV_GPU_TEMP, ...), no capabilities, "
                                 "user 65534:65534.")


def test_the_exporter_rerun_changes_nothing(exporter: ExporterRuns) -> None:
    assert exporter.second.returncode == 0, exporter.second.explain()
    assert exporter.second.recap["changed"] == 0, exporter.second.explain()


def test_a_new_port_and_profiling_replace_the_exporter(exporter: ExporterRuns) -> None:
    assert exporter.moved.returncode == 0, exporter.moved.explain()
    assert exporter.moved.recap["changed"] == 2, exporter.moved.explain()  # removed, started
    assert "DCGM_FI_DEV_GPU_TEMP{" in exporter.metrics_moved
    assert not exporter.old_port_answers


def test_testinfra_exporter_check_passes_on_the_hgx_host(hgx: HgxRun,
                                                         exporter: ExporterRuns) -> None:
    """tests/infra's exporter check, which a real host with dcgm_exporter: true runs too."""
    suite = run_infra(hgx.host, [hgx.vars_file, exporter.settings], "tests/infra/test_dcgm.py")
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    assert "3 passed" in suite.stdout, suite.stdout[-2000:]


# --- Secure Boot read from the firmware, without mokutil ---------------------------------
EFI_GLOBAL = "8be4df61-93ca-11d2-aa0d-00e098032b8c"  # UEFI's global-variable GUID


def test_secure_boot_from_the_efi_variable_alone_is_refused_with_the_mok_steps(
        hgx: HgxRun) -> None:
    """No mokutil on the host, but the firmware's SecureBoot variable says on: the play stops
    before any change with the MOK steps. Before the fix only mokutil was asked; without it
    Secure Boot was taken as off, the unsigned DKMS module was installed, and the kernel
    refused it after the reboot. The variables are efivarfs files (4 attribute bytes, then
    the value) in a fake firmware directory the role is pointed at, as on a UEFI host with
    Secure Boot on in User Mode (the container's own /sys/firmware is masked by Docker)."""
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    host, firmware = hgx.host, "/srv/fake-efi"
    assert host.exec("test", "-e", "/usr/bin/mokutil", check=False).returncode != 0
    host.exec("mkdir", "-p", f"{firmware}/efivars")
    # Attributes 0x06 (boot-service and runtime access), then the one-byte value.
    host.exec("sh", "-c", f"printf '\\006\\000\\000\\000\\001' "
                          f">{firmware}/efivars/SecureBoot-{EFI_GLOBAL}")
    host.exec("sh", "-c", f"printf '\\006\\000\\000\\000\\000' "
                          f">{firmware}/efivars/SetupMode-{EFI_GLOBAL}")
    settings = hgx.vars_file.with_name("hgx-secure-boot-vars.yml")
    settings.write_text(yaml.safe_dump({"nvidia_driver_efi_path": firmware}))
    try:
        run = run_playbook(hgx.vars_file.with_name("hgx.inventory.yml"), [hgx.vars_file, settings],
                           hgx.vars_file.with_name("hgx-secure-boot.log"),
                           "--tags", "nvidia_driver", timeout=PLAY_TIMEOUT)
    finally:
        host.exec("rm", "-rf", firmware)
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("nvidia_driver : Refuse Secure Boot without an enrolled key,"
                               " with the MOK enrolment steps"), run.explain()
    said = " ".join(run.output.split())
    assert "on, decided by the EFI variable SecureBoot." in said
    assert "Secure Boot is enabled on" in said and "Nothing was changed." in said
    assert "mokutil --import /var/lib/dkms/mok.pub" in said
    assert run.recap["changed"] == 0


# --- A newer point release of the branch in the repository ------------------------------
POINT_RELEASE = "580.999.01-1"  # a later build of the converged branch (580.126.16-1)
FABRIC = ["nvidia-fabricmanager", "libnvidia-nscq"]  # Fabric Manager and NSCQ, from 580


@dataclass
class PointReleaseRuns:
    candidate: str  # apt-cache policy's candidate for Fabric Manager once the repository has it
    first: PlaybookRun  # no Fabric Manager yet
    installed: list[str]  # after the first run
    held: set[str]
    active: str
    log: str
    repair: PlaybookRun  # Fabric Manager 580.999.01 installed and held, as the role left it before
    repaired: list[str]
    repaired_active: str
    second: PlaybookRun  # the same again


@pytest.fixture(scope="module")
def point_release(hgx: HgxRun) -> Iterator[PointReleaseRuns]:
    """The HGX host with its driver held at 580.126.16 and no Fabric Manager or NSCQ yet (a
    host whose driver was there before NVSwitch support was turned on, or a node image with
    the driver baked in), while a repository it reads holds 580.999.01 of the driver, Fabric
    Manager and NSCQ.

    Fabric Manager refuses to start when its version is not the loaded driver's (the stub
    compares with what the installed nvidia-smi reports, as the daemon does with the kernel
    module's). Before the fix the role installed the newest build of the branch (580.999.01),
    which never started, and the play failed waiting for the fabric.
    """
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    host = hgx.host
    # Off the host as NVIDIA's package leaves it: stopped (its prerm), then the unit gone.
    host.exec("systemctl", "stop", "nvidia-fabricmanager")
    host.exec("apt-mark", "unhold", *FABRIC)
    host.exec("apt-get", "purge", "-qq", "-y", *FABRIC)
    host.exec("systemctl", "daemon-reload")
    # Nor the role's Fabric Manager pin: such a host never had one.
    host.exec("rm", "-f", "/etc/apt/preferences.d/nvidia-cuda-fabricmanager.pref")
    with tempfile.TemporaryDirectory(prefix="fm-point-release-gpg-") as keys:
        key = generate_key(Path(keys), "point release stub <point@example.invalid>")
        try:
            build_repo(hgx.repos_root / "fm-point-release",
                       driver_packages(POINT_RELEASE) + fabric_manager_packages(POINT_RELEASE),
                       key, "NVIDIA", "NVIDIA CUDA")
            public_key = key.public_armored
        finally:
            key.close()
    keyring, sources = "/etc/apt/keyrings/point-release.asc", "/etc/apt/sources.list.d/point.list"
    host.exec("tee", keyring, stdin=public_key)
    host.exec("tee", sources,
              stdin=f"deb [signed-by={keyring}] {hgx.base_url}/fm-point-release/ /\n")
    # A short wait for the fabric: before the fix it never came, and the play would wait 300 s.
    quick = hgx.vars_file.with_name("hgx-point-release-vars.yml")
    quick.write_text(yaml.safe_dump({"nvidia_driver_fabric_timeout": 20}))
    inventory = hgx.vars_file.with_name("hgx.inventory.yml")
    try:
        host.exec("apt-get", "update", "-qq")  # what apt-daily.timer does on a real host
        policy = host.exec("apt-cache", "policy", "nvidia-fabricmanager").stdout
        candidate = next((line.split(":", 1)[1].strip() for line in policy.splitlines()
                          if line.strip().startswith("Candidate:")), "")
        def run(name: str) -> PlaybookRun:
            return run_playbook(inventory, [hgx.vars_file, quick],
                                hgx.vars_file.with_name(f"hgx-point-release-{name}.log"),
                                "--tags", "nvidia_driver", timeout=PLAY_TIMEOUT)

        def active() -> str:
            return host.exec("systemctl", "is-active", "nvidia-fabricmanager",
                             check=False).stdout.strip()

        first = run("1")
        installed, held, first_active = (
            _installed(host, *FABRIC, "nvidia-kernel-open-dkms"),
            set(host.exec("apt-mark", "showhold").stdout.split()), active())
        log = host.exec("journalctl", "-u", "nvidia-fabricmanager", "--no-pager", "-n", "5",
                        check=False).stdout
        # A host the role converged before the fix: the newest build, held, and failed.
        host.exec("apt-mark", "unhold", *FABRIC)
        host.exec("apt-get", "install", "-qq", "-y", "--allow-downgrades",
                  *(f"{name}={POINT_RELEASE}" for name in FABRIC))
        host.exec("apt-mark", "hold", *FABRIC)
        host.exec("systemctl", "restart", "nvidia-fabricmanager", check=False)
        repair = run("repair")
        repaired = _installed(host, *FABRIC)
        repaired_active = active()
        second = run("2")
        record_timing("HGX H100 stand-in: Fabric Manager pinned next to a newer point release",
                      first.seconds + repair.seconds + second.seconds)
        yield PointReleaseRuns(candidate, first, installed, held, first_active, log,
                               repair, repaired, repaired_active, second)
    finally:
        host.exec("rm", "-f", sources, keyring)
        host.exec("apt-get", "update", "-qq")


def test_fabric_manager_gets_the_held_drivers_build_not_the_newest(
        point_release: PointReleaseRuns) -> None:
    assert point_release.candidate == POINT_RELEASE  # the repository offers the newer build
    run = point_release.first
    assert run.returncode == 0, run.explain() + point_release.log
    assert point_release.installed == ["libnvidia-nscq 580.126.16-1",
                                       "nvidia-fabricmanager 580.126.16-1",
                                       "nvidia-kernel-open-dkms 580.126.16-1"]
    assert {*FABRIC, "nvidia-kernel-open-dkms"} <= point_release.held
    assert point_release.active == "active", point_release.log
    assert _said(run, "NVLink fabric initialised on 8 GPU(s): State Completed, Status Success")


def test_a_fabric_manager_of_the_newer_build_is_moved_to_the_drivers(
        point_release: PointReleaseRuns) -> None:
    """The state the role left before the fix (Fabric Manager 580.999.01, held, refusing to
    start) is repaired: moved to the driver's build through its hold, and started."""
    assert point_release.repair.returncode == 0, point_release.repair.explain()
    assert point_release.repaired == ["libnvidia-nscq 580.126.16-1",
                                      "nvidia-fabricmanager 580.126.16-1"]
    assert point_release.repaired_active == "active"


def test_the_pinned_fabric_manager_rerun_changes_nothing(point_release: PointReleaseRuns) -> None:
    assert point_release.second.returncode == 0, point_release.second.explain()
    assert point_release.second.recap["changed"] == 0, point_release.second.explain()


# A Fabric Manager that cannot start (here: a configuration it rejects) fails the play in
# the first round of the fabric wait, with the last lines of its log, not after
# nvidia_driver_fabric_timeout (300 s: the module's timeout guards against that wait).
# The GPUs still report the fabric "Completed" from the daemon that ran before, as real
# GPUs do after Fabric Manager exits: the play must not take that for a managed fabric.
@dataclass
class BrokenFabricRun:
    run: PlaybookRun
    state: str


@pytest.fixture(scope="module")
def broken_fabric_manager(hgx: HgxRun) -> Iterator[BrokenFabricRun]:
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    host, config = hgx.host, "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
    original = host.read(config)
    host.exec("sed", "-i", "s/^FABRIC_MODE=.*/FABRIC_MODE=9/", config)
    host.exec("systemctl", "restart", "nvidia-fabricmanager", check=False)
    inventory = hgx.vars_file.with_name("hgx.inventory.yml")
    try:
        run = run_playbook(inventory, [hgx.vars_file], hgx.vars_file.with_name("hgx-broken.log"),
                           "--tags", "nvidia_driver", timeout=PLAY_TIMEOUT)
        record_timing("HGX H100 stand-in: Fabric Manager that cannot start, refused",
                      run.seconds)
        state = host.exec("systemctl", "is-active", "nvidia-fabricmanager",
                          check=False).stdout.strip()
        yield BrokenFabricRun(run, state)
    finally:
        host.exec("tee", config, stdin=original)
        host.exec("systemctl", "restart", "nvidia-fabricmanager", check=False)


def test_a_fabric_manager_that_cannot_start_fails_the_play_with_its_log(
        broken_fabric_manager: BrokenFabricRun) -> None:
    run = broken_fabric_manager.run
    assert broken_fabric_manager.state == "failed"
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("nvidia_driver : Fail when Fabric Manager is not running, with the "
                               "last lines of its log"), run.explain()
    assert _said(run, "Fabric Manager is failed on")
    assert _said(run, "Fabric State/Status per GPU: " + ", ".join(["Completed/Success"] * 8))
    assert _said(run, "invalid FABRIC_MODE value 9 in config file "
                      "/usr/share/nvidia/nvswitch/fabricmanager.cfg")


# Last in the module: it moves the HGX host to branch 590, which no test above expects.
@pytest.fixture(scope="module")
def hgx_upgrade(hgx: HgxRun) -> tuple[PlaybookRun, PlaybookRun]:
    """Branch 580 -> 590 on the converged HGX host (the driver role only), then again."""
    assert hgx.first.returncode == 0, "converge failed; see the first test"
    upgrade = hgx.vars_file.with_name("hgx-upgrade-vars.yml")
    upgrade.write_text(yaml.safe_dump({"nvidia_driver_branch": "590"}))
    inventory = hgx.vars_file.with_name("hgx.inventory.yml")
    runs = tuple(run_playbook(inventory, [hgx.vars_file, upgrade],
                              hgx.vars_file.with_name(f"hgx-upgrade-{n}.log"),
                              "--tags", "nvidia_driver", timeout=PLAY_TIMEOUT) for n in (1, 2))
    record_timing("HGX H100 stand-in: branch 580 -> 590 with Fabric Manager", runs[0].seconds)
    return runs[0], runs[1]


def test_branch_upgrade_moves_fabric_manager_with_the_driver(
        hgx: HgxRun, hgx_upgrade: tuple[PlaybookRun, PlaybookRun]) -> None:
    """Issue 15.2: Fabric Manager and NSCQ follow the driver's branch, all three held together."""
    first, second = hgx_upgrade
    assert first.returncode == 0, first.explain()
    assert _installed(hgx.host, *FABRIC, "nvidia-kernel-open-dkms") == [
        "libnvidia-nscq 590.48.01-1", "nvidia-fabricmanager 590.48.01-1",
        "nvidia-kernel-open-dkms 590.48.01-1"]
    held = set(hgx.host.exec("apt-mark", "showhold").stdout.split())
    assert {*FABRIC, "nvidia-kernel-open-dkms"} <= held, held
    assert hgx.host.exec("systemctl", "is-active", "nvidia-fabricmanager").stdout.strip() \
        == "active"
    assert _said(first, "NVLink fabric initialised on 8 GPU(s): State Completed, Status Success")
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()
