"""site.yml for real, offline: converge, re-run, check mode, testinfra, negative cases.

The target is a Debian 12 container with systemd (tests/ansible/target.py);
NVIDIA's repositories are local stand-ins in the same layout, signed with a
throwaway key (tests/fixtures/aptrepo); Docker comes from Debian's mirror;
nvcr.io is a loopback registry that checks the credentials
(tests/ansible/fake_registry.py). The roles only use those because the test
overrides the repository URL, key fingerprint and registry variables.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.ansible.conftest import Scenarios, run_scenarios
from tests.ansible.lab import CHECK_MODE_WITNESSES, UPGRADE_TAGS, UPGRADE_VARS
from tests.ansible.playbook import (
    ANSIBLE_DIR,
    EXAMPLE_NGC_API_KEY,
    REPO,
    VAULT,
    PlaybookRun,
    run_playbook,
)
from tests.ansible.target import PREEXISTING_DAEMON_JSON, TEST_USER, TargetHost
from tests.ansible.timings import record_timing
from tests.fixtures.aptrepo import build_repo
from tests.fixtures.aptrepo.catalog import driver_packages
from tests.fixtures.aptrepo.signing import generate_key
from tests.hardware.hgx import FAKE_PCI, give_machine
from tests.hardware.machines import P100
from tests.slurm.cluster import local_cluster, node_state
from tests.support.background import BackgroundJobs, background_job
from tests.support.pypi_mirror import pypi_mirror

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(3600)]

# The converge, the fresh host's --check and the Debian 11 refusal (about 10 minutes on two
# cores) run in the background from the session's start; this module's tests run after every
# other test (`run_last`) and check what they left. tests/support/background.py.
background_job(__file__, name="site-scenarios", run_last=True)(run_scenarios)


@pytest.fixture(scope="module")
def scenarios(background_jobs: BackgroundJobs) -> Iterator[Scenarios]:
    with background_jobs.held("site-scenarios") as running:  # its hosts go with this module
        yield running


# --- converge and idempotence -------------------------------------------------------


def test_first_converge_succeeds(scenarios: Scenarios) -> None:
    result = scenarios.converge.result()
    record_timing("first converge (fresh container)", result.first.seconds)
    assert result.first.returncode == 0, result.first.explain()
    assert result.first.recap["failed"] == 0
    assert result.first.recap["changed"] > 0


def test_second_run_changes_nothing(scenarios: Scenarios) -> None:
    result = scenarios.converge.result()
    record_timing("idempotent re-run", result.second.seconds)
    assert result.second.returncode == 0, result.second.explain()
    assert result.second.recap["changed"] == 0, result.second.explain()


def test_play_shows_the_validation_result(scenarios: Scenarios) -> None:
    output = scenarios.converge.result().first.output
    assert "GPU validation on" in output and "no GPU present" in output
    assert "Docker runtimes:" in output and "nvidia" in output


def test_ngc_logged_in_each_user_once(scenarios: Scenarios) -> None:
    """One real login per user on the first run; the re-run sees the stored login and skips."""
    scenarios.converge.result()
    assert scenarios.registry.logins.attempts == [("$oauthtoken", True)] * 2


def test_daemon_json_kept_the_keys_that_were_there_before(scenarios: Scenarios) -> None:
    host = scenarios.converge.result().host
    config = json.loads(host.read("/etc/docker/daemon.json"))
    for key, value in PREEXISTING_DAEMON_JSON.items():
        assert config[key] == value
    assert config["runtimes"]["nvidia"]["path"] == "/usr/bin/nvidia-container-runtime"


def test_debians_own_entry_got_contrib_for_nvidias_packages(scenarios: Scenarios) -> None:
    """libcuda1 depends on nvidia-support, which only Debian's contrib has (as on a real host).

    The image's sources.list has Debian's main only, as debootstrap and Debian's installer
    leave it; before the role enabled contrib, the driver's install failed there.
    """
    result = scenarios.converge.result()
    assert result.first.returncode == 0, result.first.explain()
    host = result.host
    lines = host.read("/etc/apt/sources.list").splitlines()
    assert [line for line in lines if re.fullmatch(r"deb \S+ bookworm main contrib", line)], lines
    status = host.exec("dpkg-query", "-W", "-f", "${Status}", "nvidia-support").stdout
    assert status == "install ok installed"
    assert "contrib" not in host.exec("cat", *host.exec(
        "find", "/etc/apt/sources.list.d", "-type", "f").stdout.split(), "/dev/null").stdout


# --- the NGC key stays secret -------------------------------------------------------


def test_ngc_key_is_not_in_any_output_or_log(scenarios: Scenarios) -> None:
    result = scenarios.converge.result()
    for run in (result.first, result.second):
        assert run.log, "ANSIBLE_LOG_PATH produced no log: the check would be empty"
        assert "ngc : Log in with the key on stdin" in run.log
        assert EXAMPLE_NGC_API_KEY not in run.output
        assert EXAMPLE_NGC_API_KEY not in run.log


def test_ngc_key_is_never_on_a_command_line(scenarios: Scenarios) -> None:
    result = scenarios.converge.result()
    assert result.watch_samples > 100, "the process list was hardly sampled"
    assert result.leaked_command_lines == []


def test_modules_are_piped_not_copied_as_over_ssh_with_sudo(scenarios: Scenarios) -> None:
    """CI takes production's path: every module piped into python3, none copied to a file.

    A become method without pipelining (su) copies each module to the host first:
    twice the time per task, and not what an SSH + sudo inventory runs.
    """
    result = scenarios.converge.result()
    assert result.watch_samples > 100, "the process list was hardly sampled"
    assert result.unpipelined_command_lines == [], result.unpipelined_command_lines[:3]


# --- testinfra against the converged container --------------------------------------


def test_testinfra_suite_passes_on_the_converged_host(scenarios: Scenarios) -> None:
    result = scenarios.converge.result()
    assert result.first.returncode == 0, "converge failed; see test_first_converge_succeeds"
    env = {**os.environ, "TFHOST_NGC_API_KEY": EXAMPLE_NGC_API_KEY}
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/infra", f"--hosts=docker://{result.host.name}",
         "--tfhost-vars", str(scenarios.lab.vars_file), "-p", "no:cacheprovider", "-q", "-rs"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    summary = suite.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary
    assert "no NVIDIA GPU on the target host" in suite.stdout, "GPU tests should skip here"


# --- check mode and wrong keys on a fresh container ---------------------------------


def test_check_mode_passes_on_a_fresh_host(scenarios: Scenarios) -> None:
    result = scenarios.fresh.result()
    record_timing("check mode (fresh container)", result.check.seconds)
    assert result.check.returncode == 0, result.check.explain()
    assert result.check.recap["failed"] == 0


def test_check_mode_changed_nothing(scenarios: Scenarios) -> None:
    pristine = scenarios.fresh.result().pristine_after_check
    assert pristine == dict.fromkeys(CHECK_MODE_WITNESSES, True)


def test_wrong_key_stops_the_play_at_the_repository(scenarios: Scenarios) -> None:
    result = scenarios.fresh.result()
    run = result.wrong_key
    assert run.returncode != 0
    assert run.recap["failed"] == 1
    assert run.failed_task == "repo_trust : Check the key file (the pinned key and nothing else)"
    assert "Refusing NVIDIA's CUDA repository" in run.output
    assert scenarios.lab.repos.impostor_fingerprint in run.output
    assert "nvidia-cuda.list" not in result.sources_after_wrong_key


def test_repository_signed_by_another_key_is_rejected_by_apt(scenarios: Scenarios) -> None:
    """apt refuses the signature: the play stops at once, naming apt's line and the fix.

    A retry cannot change a signature; the apt module retried it five times with growing
    pauses (about half a minute, a warning per try) before it failed.
    """
    run = scenarios.fresh.result().wrong_signer
    assert run.returncode != 0
    stop = "repo_trust : Stop when apt did not read the index of NVIDIA's CUDA repository"
    assert run.failed_task == stop, run.explain()
    flat = " ".join(run.output.split())
    assert "apt refused a repository while reading the index of NVIDIA's CUDA repository" in flat
    assert "NO_PUBKEY" in flat or "not signed" in flat, run.explain()
    assert "not signed by the key its entry trusts" in flat
    assert "Sleeping for" not in run.output and "FAILED - RETRYING" not in run.output, (
        run.explain())


# --- unsupported OS -----------------------------------------------------------------


def test_unsupported_os_fails_at_once(scenarios: Scenarios) -> None:
    result = scenarios.legacy.result()
    assert result.distribution.startswith("11."), result.distribution
    run = result.run
    assert run.returncode != 0
    assert "Unsupported OS on" in run.output and "Debian 11" in run.output
    assert run.recap["failed"] == 1 and run.recap["changed"] == 0
    assert run.failed_task == "Check that the operating system is supported"
    # Only fact gathering ran before the refusal.
    assert run.recap["ok"] == 1, run.explain()


# --- variations on the converged host -----------------------------------------------


def _rerun(scenarios: Scenarios, name: str, *options: str, extra: dict[str, object] | None = None,
           vault: Path = VAULT) -> PlaybookRun:
    """Run site.yml again on the converged host with a variation."""
    result = scenarios.converge.result()
    assert result.first.returncode == 0, "converge failed; see test_first_converge_succeeds"
    files = [scenarios.lab.vars_file]
    if extra:
        files.append(scenarios.lab.extra_vars_file(f"{name}.yml", extra))
    return run_playbook(result.inventory, files, scenarios.lab.path(f"{name}.log"), *options,
                        vault=vault)


def _set_stub_gpus(scenarios: Scenarios, lines: list[str]) -> None:
    host = scenarios.converge.result().host
    if lines:
        host.exec("mkdir", "-p", "/var/lib/nvidia-stub")
        host.exec("tee", "/var/lib/nvidia-stub/gpus", stdin="\n".join(lines) + "\n")
    else:
        host.exec("rm", "-f", "/var/lib/nvidia-stub/gpus")


def test_gpu_below_compute_capability_fails_naming_the_card(scenarios: Scenarios) -> None:
    _set_stub_gpus(scenarios, ["NVIDIA H100 80GB HBM3, 9.0, 81559", "Tesla K80, 3.7, 11441"])
    try:
        run = _rerun(scenarios, "old-gpu", "--tags", "nvidia_driver")
    finally:
        _set_stub_gpus(scenarios, [])
    assert run.returncode != 0
    flat = " ".join(run.output.split())  # the message is wrapped over lines
    assert "GPU 1 (Tesla K80) on" in flat and "has compute capability 3.7;" in flat
    assert "TensorFlow needs 5.2 or newer" in flat
    assert "GPU 0 (NVIDIA H100 80GB HBM3): compute capability 9.0" in flat
    assert "GPU 0 (NVIDIA H100 80GB HBM3) on" not in flat


def _persistence_modes(report: str) -> list[str]:
    return [" ".join(line.split()) for line in report.splitlines() if "Persistence Mode" in line]


def _report_once(host: TargetHost, modes: list[str], timeout: float = 30.0) -> str:
    """`nvidia-smi -q` once it shows `modes`, or at the deadline (the assertion then says).

    The stub's persistence state follows its daemon a moment after systemctl returns; on a
    loaded machine one read straight after the stop could still see the old state.
    """
    give_up = time.monotonic() + timeout
    while True:
        report = host.exec("nvidia-smi", "-q", check=False).stdout
        if _persistence_modes(report) == modes or time.monotonic() > give_up:
            return report
        time.sleep(0.5)


def test_supported_gpus_pass_and_start_the_persistence_daemon(scenarios: Scenarios) -> None:
    """The daemon runs, and every GPU reports persistence mode on (the stub starts with it off).

    Then the boot's part: the daemon stops (persistence mode goes off with it) and
    multi-user.target is started again, as at boot: the unit must come back by itself,
    with persistence mode on (the Ubuntu stand-ins reboot for real: test_platforms.py).
    """
    _set_stub_gpus(scenarios, ["NVIDIA A100-SXM4-40GB, 8.0, 40960",
                               "NVIDIA H100 80GB HBM3, 9.0, 81559"])
    host = scenarios.converge.result().host
    try:
        run = _rerun(scenarios, "good-gpu", "--tags", "nvidia_driver")
        running = host.exec("systemctl", "is-active", "nvidia-persistenced",
                            check=False).stdout.strip()
        report = host.exec("nvidia-smi", "-q", check=False).stdout
        host.exec("systemctl", "stop", "nvidia-persistenced")
        stopped = _report_once(host, ["Persistence Mode : Disabled"] * 2)
        host.exec("systemctl", "start", "multi-user.target")
        booted = host.exec("systemctl", "is-active", "nvidia-persistenced",
                           check=False).stdout.strip()
        after_boot = _report_once(host, ["Persistence Mode : Enabled"] * 2)
    finally:
        _set_stub_gpus(scenarios, [])
        host.exec("systemctl", "stop", "nvidia-persistenced")
        host.exec("rm", "-f", "/run/nvidia-stub/persistence-mode")
    assert run.returncode == 0, run.explain()
    assert "NVIDIA A100-SXM4-40GB, 8.0" in run.output
    assert running == "active"
    assert _persistence_modes(report) == ["Persistence Mode : Enabled"] * 2, report
    assert _persistence_modes(stopped) == ["Persistence Mode : Disabled"] * 2, stopped
    assert booted == "active"
    assert _persistence_modes(after_boot) == ["Persistence Mode : Enabled"] * 2, after_boot


def test_cdi_spec_is_generated_for_the_gpus_and_kept_current(scenarios: Scenarios) -> None:
    """nvidia_container_toolkit writes /etc/cdi/nvidia.yaml where GPUs are, once (issue 15)."""
    host = scenarios.converge.result().host
    assert host.exec("test", "-e", "/etc/cdi/nvidia.yaml", check=False).returncode != 0, \
        "a GPU-less converge must not write a CDI spec"
    _set_stub_gpus(scenarios, ["NVIDIA A100-SXM4-40GB, 8.0, 40960"] * 2)
    try:
        first = _rerun(scenarios, "cdi-1", "--tags", "nvidia_container_toolkit")
        second = _rerun(scenarios, "cdi-2", "--tags", "nvidia_container_toolkit")
        spec = host.read("/etc/cdi/nvidia.yaml")
    finally:
        _set_stub_gpus(scenarios, [])
        host.exec("rm", "-f", "/etc/cdi/nvidia.yaml")
    assert first.returncode == 0, first.explain()
    assert "CDI: nvidia.com/gpu=0, nvidia.com/gpu=GPU-" in first.output
    assert "- name: all" in spec and "libcuda.so.580.126.16" in spec
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


def test_secure_boot_without_an_enrolled_key_is_refused_with_the_mok_steps(
        scenarios: Scenarios) -> None:
    """Debian with Secure Boot on: stop before the driver step, naming the MOK steps (issue 15)."""
    host = scenarios.converge.result().host
    host.exec("tee", "/usr/bin/mokutil", stdin=(
        "#!/bin/sh\n# mokutil as it answers on a Secure Boot machine without DKMS's key enrolled\n"
        "case \"$1\" in --sb-state) echo 'SecureBoot enabled';;\n"
        "  --test-key) echo \"$2 is not enrolled\"; exit 1;; esac\n"))
    host.exec("chmod", "755", "/usr/bin/mokutil")
    try:
        run = _rerun(scenarios, "secure-boot", "--tags", "nvidia_driver")
    finally:
        host.exec("rm", "-f", "/usr/bin/mokutil")
    assert run.returncode != 0
    assert run.failed_task == ("nvidia_driver : Refuse Secure Boot without an enrolled key,"
                               " with the MOK enrolment steps")
    said = " ".join(run.output.split())
    assert "Secure Boot is enabled on" in said and "Nothing was changed." in said
    assert "mokutil --import /var/lib/dkms/mok.pub" in said
    assert run.recap["changed"] == 0


def test_gpu_validation_fails_clearly_without_its_image(scenarios: Scenarios) -> None:
    _set_stub_gpus(scenarios, ["NVIDIA A100-SXM4-40GB, 8.0, 40960"])
    try:
        run = _rerun(scenarios, "no-image", "--tags", "gpu_validate")
    finally:
        _set_stub_gpus(scenarios, [])
    assert run.returncode != 0
    assert run.failed_task == "gpu_validate : Fail if the image is not available"
    assert "The validation image tfhost/workloads:ngc is not on" in run.output
    assert "it names no registry, so it is never pulled" in " ".join(run.output.split())
    assert "gpu_validate_build is never" in run.output


def test_vault_without_ngc_key_skips_the_login(scenarios: Scenarios) -> None:
    keyless = scenarios.lab.path("vault-without-ngc.yml")
    keyless.write_text("---\n# A site vault that holds other secrets but no NGC key.\n"
                       "site_backup_token: dummy\n")
    subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt", "--vault-password-file",
         str(ANSIBLE_DIR / "vault-password.example"), str(keyless)],
        check=True, capture_output=True,
    )
    before = len(scenarios.registry.logins.attempts)
    run = _rerun(scenarios, "no-ngc-key", "--tags", "ngc", vault=keyless)
    assert run.returncode == 0, run.explain()
    assert "NGC: no ngc_api_key is set" in run.output
    assert run.recap["changed"] == 0
    assert len(scenarios.registry.logins.attempts) == before


def test_rerun_restores_files_changed_by_hand(scenarios: Scenarios) -> None:
    """A re-run sends no task for a file already as the play leaves it (it compares the
    checksum, owner and mode it reads first); a change made by hand must still be undone:
    an edited repository key, daemon.json and the NGC login opened to others, a templated
    file edited and one opened to others (the roles look at their templated files once and
    run a template only where the file differs).

    Also a file of the role's that is no longer wanted: the Fabric Manager pin an earlier
    run wrote when the host was set to `nvidia_driver_fabricmanager: always` (this host
    has no NVSwitch) goes, or it would hold the package to that run's build."""
    host = scenarios.converge.result().host
    key, daemon_json = "/etc/apt/keyrings/nvidia-cuda.asc", "/etc/docker/daemon.json"
    logins = "/root/.docker/config.json"
    fabric_pin = "/etc/apt/preferences.d/nvidia-cuda-fabricmanager.pref"
    verified_key = host.read(key)
    blacklist = "/etc/modprobe.d/blacklist-nouveau.conf"
    cuda_list = "/etc/apt/sources.list.d/nvidia-cuda.list"
    templated = host.read(blacklist)
    host.exec("tee", "-a", blacklist, stdin="# appended by hand\n")
    host.exec("chmod", "0600", cuda_list)
    host.exec("tee", "-a", key, stdin="# appended by hand\n")
    host.exec("chmod", "0600", daemon_json)
    host.exec("chmod", "0644", logins)
    host.exec("tee", fabric_pin, stdin="Package: nvidia-fabricmanager\n"
              "Pin: version 580.126.16-*\nPin-Priority: 1001\n")
    run = _rerun(scenarios, "hand-edits", "--tags", "nvidia_driver,docker,ngc")
    assert run.returncode == 0, run.explain()
    assert host.read(key) == verified_key
    assert host.exec("test", "-e", fabric_pin, check=False).returncode != 0, "the stale pin stayed"
    modes = host.exec("stat", "-c", "%a %U", key, daemon_json, logins,
                      cuda_list).stdout.split("\n")[:4]
    assert modes == ["644 root", "644 root", "600 root", "644 root"]
    assert host.read(blacklist) == templated


def test_misspelt_variable_fails_before_anything_runs(scenarios: Scenarios) -> None:
    run = _rerun(scenarios, "typo", extra={"nvidia_driver_brnach": "590"})
    assert run.returncode != 0
    assert "Unknown variable(s): nvidia_driver_brnach" in run.output
    assert run.failed_task.startswith("Check for misspelt role variables")


def test_mistyped_variable_fails_before_anything_runs(scenarios: Scenarios) -> None:
    run = _rerun(scenarios, "bad-type", extra={"docker_source": "snap", "cudnn_hold": "perhaps"})
    assert run.returncode != 0
    assert "docker_source" in run.output and "snap" in run.output
    assert "cudnn_hold" in run.output
    assert run.failed_task == (
        "Check every role's variables against its argument spec before anything changes"
    )



# --- tensorflow_host for real on the converged host ----------------------------------
# The role's pinned TensorFlow, installed by the role's own pip into its virtual
# environment as the environment's owner (not root), through the mirror variable
# (tensorflow_host_pip_index_url) pointed at a loopback index that passes PyPI through
# and keeps the wheels between runs (tests/support/pypi_mirror.py).

PYPI_CACHE = Path(os.environ.get("TFHOST_PYPI_CACHE", "/var/cache/tfhost-pypi"))
TF_VENV = "/opt/tensorflow"
GPU_LOCK = REPO / "requirements" / "gpu.txt"
PIP_LOCK = REPO / "requirements" / "pip.txt"
# Where the resolution's pip lives on the host: the lock's pip, beside the role's venv.
RESOLVER_VENV = "/opt/tfhost-resolver"


def _role_default() -> Requirement:
    """The role's default TensorFlow requirement: tensorflow[and-cuda]==<the images' version>."""
    defaults = yaml.safe_load(
        (ANSIBLE_DIR / "roles" / "tensorflow_host" / "defaults" / "main.yml").read_text())
    [pinned] = [Requirement(text) for text in defaults["tensorflow_host_requirements"]
                if Requirement(text).name == "tensorflow"]
    assert str(pinned.specifier).startswith("=="), "the role pins TensorFlow to one version"
    return pinned


def _pinned_tensorflow() -> str:
    """The role's default requirement without its [and-cuda] extra: the same TensorFlow
    wheel, installed for real, without the CUDA wheels (several GB) that only a GPU uses.
    The default itself, extra included, is resolved against the lock (`tensorflow_host`)."""
    pinned = _role_default()
    return f"{pinned.name}{pinned.specifier}"


def _lock_constraints() -> str:
    """requirements/gpu.txt as pip constraints: each pin with its marker, without hashes."""
    return "".join(line.rstrip(" \\") + "\n" for line in GPU_LOCK.read_text().splitlines()
                   if line and not line[0].isspace() and not line.startswith("#"))


@dataclass
class TensorflowRuns:
    requirement: str
    first: PlaybookRun
    second: PlaybookRun
    imported: subprocess.CompletedProcess[str]
    not_the_owners: str
    downloaded_mb: float
    cached_mb: float
    # The role's default (tensorflow[and-cuda]) resolved by the host's pip against the lock:
    # what it would install (pip's --dry-run report), pip's output, and the MB the mirror
    # served for that resolution.
    resolved: dict[str, str]
    environment: dict[str, str]  # the marker values pip resolved for (python_full_version, ...)
    resolution: subprocess.CompletedProcess[str]
    resolution_mb: float


@pytest.fixture(scope="module")
def tensorflow_host(scenarios: Scenarios) -> TensorflowRuns:
    requirement = _pinned_tensorflow()
    host = scenarios.converge.result().host
    with pypi_mirror(PYPI_CACHE, scenarios.lab.path("pypi-mirror.log")) as mirror:
        extra = {"tensorflow_host_enabled": True, "tensorflow_host_venv": TF_VENV,
                 "tensorflow_host_owner": TEST_USER,
                 "tensorflow_host_requirements": [requirement],
                 "tensorflow_host_pip_index_url": mirror.index_url}
        first = _rerun(scenarios, "tensorflow-host-1", "--tags", "tensorflow_host", extra=extra)
        record_timing("tensorflow_host: install TensorFlow", first.seconds)
        second = _rerun(scenarios, "tensorflow-host-2", "--tags", "tensorflow_host", extra=extra)
        record_timing("tensorflow_host: re-run", second.seconds)
        # The real default, [and-cuda] included, resolved with the host's Python against the
        # images' lock, from PEP 658 metadata only, not the CUDA wheels (the mirror has metadata
        # for every wheel). By the lock's pip (requirements/pip.txt): Debian 12's pip 23.0
        # downloads every wheel of a resolution, --dry-run or not.
        host.exec("tee", "/tmp/pip-lock.txt", stdin=PIP_LOCK.read_text())
        host.exec("python3", "-m", "venv", RESOLVER_VENV)
        host.exec(f"{RESOLVER_VENV}/bin/pip", "install", "--quiet", "--no-deps", "--require-hashes",
                  "--index-url", mirror.index_url, "-r", "/tmp/pip-lock.txt")
        host.exec("tee", "/tmp/gpu-constraints.txt", stdin=_lock_constraints())
        served = mirror.log.downloaded_bytes + mirror.log.cached_bytes
        resolution = host.exec(
            "sudo", "-u", TEST_USER, f"{RESOLVER_VENV}/bin/pip", "install", "--dry-run",
            "--ignore-installed", "--quiet", "--report", "-", "--index-url", mirror.index_url,
            "--constraint", "/tmp/gpu-constraints.txt", str(_role_default()), check=False)
        resolution_mb = (mirror.log.downloaded_bytes + mirror.log.cached_bytes - served) / 2**20
    imported = host.exec("sudo", "-u", TEST_USER, f"{TF_VENV}/bin/python", "-c",
                         "import tensorflow as tf; print(tf.__version__)", check=False)
    others = host.exec("find", TF_VENV, "-not", "-user", TEST_USER).stdout
    megabytes = 1024 * 1024
    resolved: dict[str, str] = {}
    environment: dict[str, str] = {}
    if resolution.returncode == 0:
        report = json.loads(resolution.stdout)
        resolved = {str(canonicalize_name(item["metadata"]["name"])): item["metadata"]["version"]
                    for item in report["install"]}
        environment = report["environment"]  # the markers' values on the host, as pip saw them
    return TensorflowRuns(requirement, first, second, imported, others,
                          round(mirror.log.downloaded_bytes / megabytes, 1),
                          round(mirror.log.cached_bytes / megabytes, 1),
                          resolved, environment, resolution, round(resolution_mb, 1))


def test_tensorflow_host_installs_the_pinned_tensorflow_for_its_owner(
        tensorflow_host: TensorflowRuns) -> None:
    run = tensorflow_host.first
    print(f"tensorflow_host: {run.seconds:.0f} s; wheels from PyPI "
          f"{tensorflow_host.downloaded_mb} MB, from the cache {tensorflow_host.cached_mb} MB")
    assert run.returncode == 0, run.explain()
    version = tensorflow_host.requirement.split("==")[1]
    assert f"TensorFlow {version} in {TF_VENV} sees 0 GPU(s)." in " ".join(run.output.split())
    imported = tensorflow_host.imported
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.split()[-1] == version
    assert tensorflow_host.not_the_owners == "", "root left files in the owner's environment"


def test_tensorflow_host_default_with_its_cuda_wheels_resolves_against_the_lock(
        tensorflow_host: TensorflowRuns) -> None:
    """The role's real default, tensorflow[and-cuda]==<version>, resolved on the host (its
    Python, its platform) with requirements/gpu.txt as constraints: TensorFlow and NVIDIA's
    CUDA and cuDNN wheels at the lock's versions, from metadata alone. Before, the test
    stripped [and-cuda], and a default whose CUDA wheels the lock could not satisfy went
    unseen."""
    resolution = tensorflow_host.resolution
    print(f"tensorflow[and-cuda] resolved from {tensorflow_host.resolution_mb} MB of metadata")
    assert resolution.returncode == 0, resolution.stderr[-3000:]
    resolved = tensorflow_host.resolved
    # The lock's pins for the host's Python (numpy has one line per Python range).
    lock = {str(canonicalize_name(requirement.name)): str(requirement.specifier).removeprefix("==")
            for requirement in map(Requirement, _lock_constraints().splitlines())
            if requirement.marker is None
            or requirement.marker.evaluate(tensorflow_host.environment)}
    version = tensorflow_host.requirement.split("==")[1]
    assert resolved.get("tensorflow") == version, resolved
    cuda = ["nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12"]
    assert {name: resolved.get(name) for name in cuda} == {name: lock[name] for name in cuda}
    assert {name: found for name, found in resolved.items()
            if name in lock and lock[name] != found} == {}
    assert tensorflow_host.resolution_mb < 100, "the CUDA wheels were downloaded, not resolved"


def test_tensorflow_host_rerun_changes_nothing(tensorflow_host: TensorflowRuns) -> None:
    second = tensorflow_host.second
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


# --- Pascal GPUs, then upgrades on the converged host ------------------------------------
# Last in the module: they move the converged host to the proprietary modules, then to the
# stub repositories' second version of everything, which no test above expects.

# UPGRADE_VARS / UPGRADE_TAGS (tests/ansible/lab.py): the newer of each pair in
# tests/fixtures/aptrepo/catalog.py, for the roles they belong to. The driver's packages
# have the same names on both branches.
DRIVER_PACKAGES = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-smi",
                   "nvidia-persistenced", "libcuda1", "libnvidia-ml1", "firmware-nvidia-gsp"]
CUDNN_9_10 = ["libcudnn9-cuda-12", "libcudnn9-dev-cuda-12", "libcudnn9-headers-cuda-12"]
TOOLKIT_1_18 = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                "libnvidia-container-tools", "libnvidia-container1"]


@dataclass
class RollingUpgrade:
    """upgrade.yml over a fleet of four stand-ins, each a node of a local SLURM cluster."""

    first: PlaybookRun  # upgrade.yml: the converged host upgraded, then the planted failure
    second: PlaybookRun  # site.yml again on the upgraded host: nothing to change
    hosts: list[str]  # in rollout order
    nodes: dict[str, tuple[str, str]]  # node -> (State, Reason) after the rollout
    slurm_log: str  # slurmctld's log: every drain and resume, in order


_node = node_state


@pytest.fixture(scope="module")
def upgrade(scenarios: Scenarios, pascal: PascalRuns,
            tmp_path_factory: pytest.TempPathFactory) -> RollingUpgrade:
    """upgrade.yml moves the fleet to the new versions, one batch at a time (serial 1, then 2).

    The fleet: the converged host (old versions, Pascal's proprietary modules), which gets the
    new ones on GPUs that take the open modules (branch 590 and a flavour change at once); then
    a batch of two: the fresh host, planted with a Secure Boot that refuses the driver (the
    failure), beside the converged host again under a second name; then the fresh host under a
    third, which the rollout must never reach. Each is a node of a local SLURM cluster (no slurmd
    behind the stand-ins: scontrol on the controller sets their state); the play reaches it from
    an inventory host of its own, the controller, as a fleet's SLURM controller. Then site.yml
    again on the upgraded host. From 590 NVIDIA's pinning package tracks the branch."""
    assert pascal.first.returncode == 0, pascal.first.explain()
    converged, fresh = scenarios.converge.result(), scenarios.fresh.result()
    suffix = converged.host.name.rsplit("-", 1)[-1]
    hosts = {converged.host.name: converged.host.name, fresh.host.name: fresh.host.name,
             f"tfhost-ans-again-{suffix}": converged.host.name,
             f"tfhost-ans-last-{suffix}": fresh.host.name}
    docker_host = {"ansible_connection": "community.docker.docker",
                   "ansible_python_interpreter": "/usr/bin/python3",
                   "ansible_become_method": "sudo"}
    inventory = scenarios.lab.path("fleet.inventory.yml")
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"slurm-controller": {"ansible_connection": "local",
                                       "ansible_python_interpreter": sys.executable,
                                       "ansible_become": False}},
        "children": {"gpu_hosts": {"hosts": {
            name: {**docker_host, "ansible_host": container}
            for name, container in hosts.items()}}}}}, sort_keys=False))
    mokutil = ("#!/bin/sh\n# mokutil on a Secure Boot machine without DKMS's key enrolled\n"
               "case \"$1\" in --sb-state) echo 'SecureBoot enabled';;\n"
               "  --test-key) echo \"$2 is not enrolled\"; exit 1;; esac\n")
    with local_cluster(tmp_path_factory.mktemp("slurm"),
                       TFHOST_SLURM_NODES=" ".join(hosts)) as env:
        fresh.host.exec("tee", "/usr/bin/mokutil", stdin=mokutil)
        fresh.host.exec("chmod", "755", "/usr/bin/mokutil")
        # What slurmctld logs from here on is the rollout's (the cluster's own set-up of the
        # stand-in nodes, DOWN then IDLE, comes before).
        controller_log = Path(env["TFHOST_SLURM_DIR"]) / "slurmctld.log"
        before = controller_log.stat().st_size if controller_log.exists() else 0
        try:
            first = run_playbook(
                inventory, [scenarios.lab.vars_file, scenarios.lab.extra_vars_file(
                    "upgrade.yml", {**UPGRADE_VARS, "upgrade_serial": [1, 2],
                                    "upgrade_slurm_controller": "slurm-controller",
                                    "upgrade_slurm_conf": env["SLURM_CONF"],
                                    "upgrade_drain_poll": 1, "upgrade_drain_timeout": 30})],
                scenarios.lab.path("upgrade-1.log"), playbook="upgrade.yml")
        finally:
            fresh.host.exec("rm", "-f", "/usr/bin/mokutil")
        record_timing("rolling upgrade (upgrade.yml) to the second versions", first.seconds)
        nodes = {name: _node(env, name) for name in hosts}
        slurm_log = controller_log.read_bytes()[before:].decode("utf-8", "replace")
    second = _rerun(scenarios, "upgrade-2", "--tags", UPGRADE_TAGS, extra=UPGRADE_VARS)
    record_timing("re-run after the upgrade", second.seconds)
    return RollingUpgrade(first, second, list(hosts), nodes, slurm_log)


def _installed(scenarios: Scenarios) -> dict[str, str]:
    """Every installed package and its version, as dpkg has it (held or not: "ii" or "hi")."""
    listing = scenarios.converge.result().host.exec(
        "dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\n").stdout
    return {fields[1]: fields[2] for fields in map(str.split, listing.splitlines())
            if fields[0][1:] == "i"}


POINT_RELEASE = "580.999.01-1"  # a later build of the converged branch (580.126.16-1)


def test_a_newer_build_of_the_branch_leaves_the_held_driver_alone(scenarios: Scenarios) -> None:
    """NVIDIA publishes point releases of a branch, and apt's daily timer reads them.

    A re-run must leave the held driver at the build it has and change nothing. Before
    the fix the apt module, given nvidia-smi=580.*, asked for the newer 580 build, and
    apt refused to move the held packages ("E: Unable to correct problems, you have held
    broken packages"): every re-run failed from the day the repository got a point
    release. (Moving to a newer build is `nvidia_driver_branch`'s job, or an explicit
    unhold and upgrade.)
    """
    result = scenarios.converge.result()
    assert result.first.returncode == 0, "converge failed; see test_first_converge_succeeds"
    host, lab = result.host, scenarios.lab
    with tempfile.TemporaryDirectory(prefix="point-release-gpg-") as keys:
        key = generate_key(Path(keys), "point release stub <point@example.invalid>")
        try:
            build_repo(lab.repos.root / "point-release", driver_packages(POINT_RELEASE), key,
                       "NVIDIA", "NVIDIA CUDA")
            public_key = key.public_armored
        finally:
            key.close()
    keyring, sources = "/etc/apt/keyrings/point-release.asc", "/etc/apt/sources.list.d/point.list"
    host.exec("tee", keyring, stdin=public_key)
    host.exec("tee", sources, stdin=f"deb [signed-by={keyring}] {lab.base_url}/point-release/ /\n")
    try:
        host.exec("apt-get", "update", "-qq")  # what apt-daily.timer does on a real host
        policy = host.exec("apt-cache", "policy", "nvidia-smi").stdout
        assert f"Candidate: {POINT_RELEASE}" in policy, policy  # the newer build is offered
        run = _rerun(scenarios, "point-release", "--tags", "nvidia_driver")
    finally:
        host.exec("rm", "-f", sources, keyring)
        host.exec("apt-get", "update", "-qq")
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()
    installed = _installed(scenarios)
    assert {name: installed.get(name) for name in DRIVER_PACKAGES} == dict.fromkeys(
        DRIVER_PACKAGES, "580.126.16-1")


@pytest.fixture(scope="module")
def pascal(scenarios: Scenarios, tmp_path_factory: pytest.TempPathFactory) -> PascalRuns:
    """The converged host's GPUs become four Tesla P100s while NVIDIA's repository has 590.

    Pascal takes the proprietary kernel modules only, and 580 is its last branch (590 no
    longer drives it: NVIDIA's forum has a Debian host where cuda-drivers-580 pulled 590's
    packages in and the GTX 1070 Ti stopped working). The driver role moves the held open
    modules to the proprietary ones on 580 (a flavour change on the same branch: before the
    fix apt refused, nvidia-kernel-dkms conflicting with the held nvidia-kernel-open-dkms),
    and apt, asked for NVIDIA's meta-packages whose dependencies have only a lower bound, or
    for every upgrade with the holds ignored, takes no 590 package.
    """
    host = scenarios.converge.result().host
    devices = give_machine(host, P100, tmp_path_factory.mktemp("pascal"))
    extra: dict[str, object] = {"nvidia_driver_pci_devices_path": devices}
    try:
        first = _rerun(scenarios, "pascal-1", "--tags", "nvidia_driver", extra=extra)
        record_timing("Pascal GPUs: open -> proprietary modules on 580", first.seconds)
        second = _rerun(scenarios, "pascal-2", "--tags", "nvidia_driver", extra=extra)
        meta = host.exec("apt-get", "install", "--simulate", "cuda-drivers", "cuda-drivers-580",
                         check=False)
        unheld = host.exec("apt-get", "dist-upgrade", "--simulate", "-o", "APT::Ignore-Hold=true",
                           check=False)
        policy = host.exec("apt-cache", "policy", "nvidia-driver-cuda").stdout
    finally:
        host.exec("rm", "-rf", "/var/lib/nvidia-stub/gpus", "/var/lib/nvidia-stub/pci-devices",
                  FAKE_PCI)
    return PascalRuns(first, second, meta.stdout + meta.stderr, unheld.stdout + unheld.stderr,
                      policy)


@dataclass
class PascalRuns:
    first: PlaybookRun
    second: PlaybookRun
    meta: str  # apt-get install --simulate cuda-drivers cuda-drivers-580
    unheld: str  # apt-get dist-upgrade --simulate, holds ignored
    policy: str  # apt-cache policy nvidia-driver-cuda


def test_pascal_gpus_get_the_proprietary_modules_of_580_held(
        scenarios: Scenarios, pascal: PascalRuns) -> None:
    first, second = pascal.first, pascal.second
    assert first.returncode == 0, first.explain()
    assert "4 NVIDIA GPU(s) Pascal (GP100), 0 NVSwitch(es): proprietary kernel modules" in " ".join(
        first.output.split())
    installed = _installed(scenarios)
    assert installed.get("nvidia-kernel-dkms") == "580.126.16-1"
    assert "nvidia-kernel-open-dkms" not in installed
    held = set(scenarios.converge.result().host.exec("apt-mark", "showhold").stdout.split())
    assert {"nvidia-kernel-dkms", "nvidia-driver-cuda", "nvidia-smi"} - held == set()
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


def test_a_580_host_takes_no_590_package_even_through_a_meta_package(
        scenarios: Scenarios, pascal: PascalRuns) -> None:
    """cuda-drivers-580 and cuda-drivers depend on the driver with a lower bound only, and 590
    is in the repository: apt's candidate for every driver package is still 580's, with the
    holds or without them (nvidia-cuda.pref's branch pin)."""
    assert pascal.first.returncode == 0, pascal.first.explain()
    assert "Candidate: 580.126.16-1" in pascal.policy, pascal.policy
    assert "590.48.01-1" in pascal.policy, "the repository should offer 590"
    assert "Inst cuda-drivers (580.126.16-1" in pascal.meta, pascal.meta
    assert "590." not in pascal.meta, pascal.meta
    assert "590." not in pascal.unheld, pascal.unheld


def test_upgrade_installs_the_new_versions(scenarios: Scenarios, upgrade: RollingUpgrade) -> None:
    """A new branch, CUDA release, cuDNN and toolkit build replace the held old ones; the
    proprietary modules Pascal needed give way to the open ones; NVIDIA's pinning package
    for 590 is installed."""
    first = upgrade.first
    assert first.recaps[upgrade.hosts[0]]["failed"] == 0, first.explain()
    installed = _installed(scenarios)
    assert {name: installed.get(name) for name in DRIVER_PACKAGES} == dict.fromkeys(
        DRIVER_PACKAGES, "590.48.01-1")
    leftovers = {name: version for name, version in installed.items()
                 if version.startswith("580.")}
    assert leftovers == {}, "packages of the old branch are still installed"
    assert "nvidia-kernel-dkms" not in installed
    assert installed.get("nvidia-driver-pinning-590") == "590-1"
    pin = scenarios.converge.result().host.read("/etc/apt/preferences.d/nvidia-driver-pin")
    assert "Pin: version 590.*" in pin, pin
    assert installed.get("cuda-toolkit-12-9") == "12.9.1-1"
    assert {name: installed.get(name) for name in CUDNN_9_10} == dict.fromkeys(
        CUDNN_9_10, "9.10.2.21-1")
    assert {name: installed.get(name) for name in TOOLKIT_1_18} == dict.fromkeys(
        TOOLKIT_1_18, "1.18.0-1")
    smi = scenarios.converge.result().host.read("/usr/bin/nvidia-smi")
    assert 'DRIVER_VERSION = "590.48.01"' in smi, "nvidia-smi is not the new branch's"


def test_upgrade_holds_the_new_versions(scenarios: Scenarios, upgrade: RollingUpgrade) -> None:
    """What moved is held again, so a plain `apt upgrade` cannot move it on."""
    assert upgrade.first.recaps[upgrade.hosts[0]]["failed"] == 0, upgrade.first.explain()
    held = set(scenarios.converge.result().host.exec("apt-mark", "showhold").stdout.split())
    wanted = {*DRIVER_PACKAGES, "cuda-toolkit-12-9", *CUDNN_9_10, *TOOLKIT_1_18}
    assert wanted - held == set()


def test_rerun_after_the_upgrade_changes_nothing(upgrade: RollingUpgrade) -> None:
    second = upgrade.second
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


def _log_lines(log: str, node: str) -> list[str]:
    """slurmctld's lines about `node`'s drains and resumes, in order."""
    return [line for line in log.splitlines()
            if f"node {node} " in line and ("reason set to" in line or "state set to" in line)]


def test_rolling_upgrade_drains_upgrades_and_resumes_the_good_host(upgrade: RollingUpgrade) -> None:
    """The first host's node was drained with the play's reason before its upgrade, and resumed
    after it passed: idle again, no reason left."""
    first, good = upgrade.first, upgrade.hosts[0]
    assert first.recaps[good]["failed"] == 0, first.explain()
    assert upgrade.nodes[good][0] == "IDLE" or upgrade.nodes[good][0].startswith("IDLE+NOT_RESP"), (
        upgrade.nodes[good])
    assert "DRAIN" not in upgrade.nodes[good][0] and upgrade.nodes[good][1] == "", upgrade.nodes
    lines = _log_lines(upgrade.slurm_log, good)
    drains = [n for n, line in enumerate(lines) if "reason set to: workloads-upgrade: upgrading to "
              "driver branch 590; host; wait for upgrade.yml; since " in line]
    resumes = [n for n, line in enumerate(lines) if "state set to IDLE" in line]
    assert drains and resumes and drains[0] < resumes[-1], lines
    said = " ".join(first.output.split())
    assert f"{good} upgraded to driver branch 590 and validated; SLURM node {good} resumed." in said


def test_rolling_upgrade_stops_at_the_failing_host_and_leaves_it_drained(
        upgrade: RollingUpgrade) -> None:
    """The planted failure (Secure Boot refuses the driver) on the second batch's first host:
    its node stays drained, the reason naming the step; the host beside it in that batch stops
    there too (max_fail_percentage 0), drained; the last host is never reached."""
    first = upgrade.first
    _, failing, beside, last = upgrade.hosts
    assert first.returncode != 0
    assert first.recaps[failing]["failed"] == 1, first.explain()
    state, reason = upgrade.nodes[failing]
    assert "DRAIN" in state.split("+"), upgrade.nodes
    step = "Refuse Secure Boot without an enrolled key"
    assert reason.startswith(f"workloads-upgrade: failed at {step}"), reason
    assert "; host; fix it, run upgrade.yml again; since " in reason
    said = " ".join(first.output.split())
    assert f"The upgrade of {failing} failed at" in said and "The rollout stops" in said
    assert f"Its SLURM node {failing} stays drained" in said
    assert "DRAIN" in upgrade.nodes[beside][0].split("+"), upgrade.nodes
    assert upgrade.nodes[beside][1].startswith("workloads-upgrade:"), upgrade.nodes
    assert last not in first.recaps, first.explain()
    assert upgrade.nodes[last] in {("IDLE", ""), ("IDLE+NOT_RESPONDING", "")}, upgrade.nodes
    assert _log_lines(upgrade.slurm_log, last) == []
