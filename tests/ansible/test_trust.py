"""Repository trust on a real Debian 12 host: only the pinned key, and an interrupted run recovers.

Each test boots its own fresh target container (tests/ansible/target.py) and
runs site.yml's nvidia_driver role against the stub CUDA repository
(tests/ansible/trust_lab.py adds the hostile variants). A host the vendors' own
install guides set up first is a brownfield stand-in of test_platforms.py.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.playbook import PlaybookRun
from tests.ansible.target import TEST_USER
from tests.ansible.trust_lab import APPENDED, CUDA_DIR, EVIL, TWO_KEYS, TrustLab, trust_lab
from tests.support.background import AFTER_RUN_LAST, BackgroundJobs, JobContext, background_job
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(900)]

SUFFIX = str(os.getpid())


def _task_status(output: str, task: str) -> str:
    """The first word after the banner of `task` ("ok", "changed", "skipping", "fatal", or "")."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith(f"TASK [{task}]"):
            for after in lines[index + 1:]:
                if after.startswith("TASK ["):
                    return ""
                word = after.split(":", 1)[0]
                if word in ("ok", "changed", "skipping", "fatal", "failed"):
                    return word
    return ""


@dataclass(frozen=True)
class KeyFileRun:
    """A run given a key file with a second key, and what it left on the host."""

    run: PlaybookRun
    sources: str  # ls of sources.list.d and the keyrings
    lists: str  # ls of apt's lists


@dataclass(frozen=True)
class InterruptedRuns:
    first: PlaybookRun
    sources_written: bool
    second: PlaybookRun
    smi_installed: bool


@dataclass(frozen=True)
class OtherRepositoryRun:
    """A run on a host whose own sources name another vendor's repository that apt refuses."""

    run: PlaybookRun
    entry: str  # the host's entry for that repository
    driver_installed: bool


@dataclass(frozen=True)
class SymlinkRuns:
    ngc: PlaybookRun
    etc_docker: list[str]  # owner and mode of /etc/docker
    etc_docker_files: list[str]
    venv_run: PlaybookRun
    ran_as: list[str]  # the uids the venv's programs ran as
    user_uid: str


@dataclass(frozen=True)
class TrustRuns:
    """Every scenario's runs, with what the tests compare them to."""

    key_files: dict[str, KeyFileRun]  # by the key file's folder
    interrupted: InterruptedRuns
    other_repository: OtherRepositoryRun
    symlinks: SymlinkRuns
    cuda_fingerprint: str
    extra_fingerprint: str
    http_log: str  # what the stand-in repositories served, every scenario's requests


def _key_file_run(lab: TrustLab, key_file: Path) -> KeyFileRun:
    """A mirror serves the pinned key plus its own, and a Release signed by its own."""
    host, inventory = lab.start(f"tfhost-trust-keys-{SUFFIX}")
    try:
        run = lab.run(inventory, f"two-keys-{key_file.parent}", {
            "nvidia_driver_cuda_repo_base_url": f"{lab.base_url}/evil/compute/cuda/repos",
            "nvidia_driver_cuda_repo_key_url": f"{lab.base_url}/{key_file}",
        }, "--tags", "nvidia_driver")
        sources = host.exec("ls", "/etc/apt/sources.list.d/", "/etc/apt/keyrings/").stdout
        lists = host.exec("ls", "/var/lib/apt/lists/").stdout
    finally:
        host.remove()
    return KeyFileRun(run, sources, lists)


def _interrupted_runs(lab: TrustLab) -> InterruptedRuns:
    """The first run writes the sources file, then dies reading the index (repository down);
    the second runs with the repository back."""
    host, inventory = lab.start(f"tfhost-trust-interrupted-{SUFFIX}")
    mirror = {
        # The kernel headers are not what this test is about (the converge installs them); a
        # package already present keeps their download out of it.
        "nvidia_driver_kernel_headers_packages": ["kmod"],
        "nvidia_driver_cuda_repo_base_url": f"{lab.flaky_url}/compute/cuda/repos",
        "nvidia_driver_cuda_repo_key_url": (
            f"{lab.base_url}/compute/cuda/repos/debian12/x86_64/3bf863cc.pub"),
    }
    try:
        lab.cuda_repo_online(False)
        first = lab.run(inventory, "interrupted-1", mirror, "--tags", "nvidia_driver")
        written = host.exec("test", "-e", "/etc/apt/sources.list.d/nvidia-cuda.list",
                            check=False).returncode == 0
        lab.cuda_repo_online(True)
        second = lab.run(inventory, "interrupted-2", mirror, "--tags", "nvidia_driver")
        smi = host.exec("test", "-x", "/usr/bin/nvidia-smi", check=False).returncode == 0
    finally:
        lab.cuda_repo_online(True)
        host.remove()
    return InterruptedRuns(first, written, second, smi)


# A stand-in for a virtual environment the owner controls: every program in it
# records who ran it. Root must never be among them.
PLANTED_PROGRAM = """#!/bin/sh
id -u >>/var/tmp/tfvenv-ran-as
case "$*" in
  *import*) echo "2.21.0 0" ;;
esac
exit 0
"""


def _other_repository_run(lab: TrustLab) -> OtherRepositoryRun:
    """The host already has another vendor's repository in its sources (one-line, no
    signed-by: trusted.gpg.d's keys) whose Release is signed by a key the host lacks. The
    stand-in's own lists are minutes old (target.py reads them at start), so the headers'
    read, fresh for an hour, does not run; the contrib read, which always reads, meets it."""
    vendor = lab.flaky_root / "other-vendor"
    shutil.copytree(lab.repos.root / EVIL / CUDA_DIR, vendor)
    entry = f"deb {lab.flaky_url}/other-vendor/ /"
    host, inventory = lab.start(f"tfhost-trust-other-repo-{SUFFIX}")
    try:
        host.exec("tee", "/etc/apt/sources.list.d/other-vendor.list", stdin=entry + "\n")
        run = lab.run(inventory, "other-repository-refused", None, "--tags", "nvidia_driver")
        driver = host.exec("test", "-e", "/usr/bin/nvidia-smi", check=False).returncode == 0
    finally:
        host.remove()
    return OtherRepositoryRun(run, entry, driver)


def _symlink_runs(lab: TrustLab) -> SymlinkRuns:
    """~/.docker -> /etc/docker for the ngc role; a venv its owner can change for
    tensorflow_host."""
    host, inventory = lab.start(f"tfhost-trust-symlinks-{SUFFIX}")
    try:
        host.exec("su", "-", TEST_USER, "-c", "ln -s /etc/docker ~/.docker")
        ngc = lab.run(inventory, "symlinked-docker-config", {"ngc_users": [TEST_USER]},
                      "--tags", "ngc")
        etc_docker = host.exec("stat", "-c", "%U %a", "/etc/docker").stdout.split()
        etc_docker_files = host.exec("ls", "/etc/docker").stdout.split()

        venv = "/opt/tfvenv"
        host.exec("install", "-d", "-o", TEST_USER, "-m", "0755", venv, f"{venv}/bin")
        host.exec("su", TEST_USER, "-c", f"touch {venv}/bin/activate")
        for program in ("pip", "python"):
            host.exec("su", TEST_USER, "-c", f"cat >{venv}/bin/{program} && chmod 0755 "
                      f"{venv}/bin/{program}", stdin=PLANTED_PROGRAM)
        venv_run = lab.run(inventory, "user-owned-venv", {
            "tensorflow_host_enabled": True, "tensorflow_host_venv": venv,
            "tensorflow_host_owner": TEST_USER}, "--tags", "tensorflow_host")
        ran_as = host.exec("cat", "/var/tmp/tfvenv-ran-as", check=False).stdout.split()
        user_uid = host.exec("id", "-u", TEST_USER).stdout.strip()
    finally:
        host.remove()
    return SymlinkRuns(ngc, etc_docker, etc_docker_files, venv_run, ran_as, user_uid)


@background_job(__file__, name="trust", run_last=AFTER_RUN_LAST)
def _trust_runs(job: JobContext) -> TrustRuns:
    """Every scenario, one fresh host each, in a background job queued behind the converges;
    this module's tests run after theirs (tests/support/background.py, AFTER_RUN_LAST)."""
    ensure_engine()
    with trust_lab(job.workdir) as lab:
        key_files = {str(key_file.parent): _key_file_run(lab, key_file)
                     for key_file in (TWO_KEYS, APPENDED)}
        interrupted = _interrupted_runs(lab)
        other_repository = _other_repository_run(lab)
        symlinks = _symlink_runs(lab)
        return TrustRuns(key_files, interrupted, other_repository, symlinks,
                         lab.repos.cuda_fingerprint, lab.extra_fingerprint,
                         lab.http_log.read_text())


@pytest.fixture(scope="module")
def runs(background_jobs: BackgroundJobs) -> TrustRuns:
    with background_jobs.held("trust") as value:
        return value


@pytest.mark.parametrize(("key_file", "problem"), [
    pytest.param(TWO_KEYS, "holds the pinned key {pinned} and also {extra};", id="one-block"),
    pytest.param(APPENDED, "holds the pinned key {pinned} and also {extra};",
                 id="appended-block"),
])
def test_key_file_with_a_second_key_is_refused_and_its_release_never_read(
        runs: TrustRuns, key_file: Path, problem: str) -> None:
    """A mirror serves the pinned key plus its own, and a Release signed by its own.

    One block holding both keys: before the first fix the pinned fingerprint was
    found "among" the keys, both were installed as the signed-by keyring, and apt
    accepted the mirror's Release. The vendor's block with the mirror's appended as a
    second block: before the second fix only the first block was read, the whole file
    was installed, and apt (2.6) accepted the Release the appended key signed.
    """
    scenario = runs.key_files[str(key_file.parent)]
    run = scenario.run
    assert run.returncode != 0, run.explain()
    assert run.recap["failed"] == 1, run.explain()
    assert run.failed_task == "repo_trust : Check the key file (the pinned key and nothing else)", (
        run.explain())
    flat = " ".join(run.output.split())
    assert "Refusing NVIDIA's CUDA repository: the key file at" in flat
    assert problem.format(pinned=runs.cuda_fingerprint, extra=runs.extra_fingerprint) in flat
    # Nothing was written, and apt never fetched (let alone accepted) the mirror's Release.
    assert "nvidia-cuda" not in scenario.sources
    assert "evil" not in scenario.lists
    assert "/evil/" not in runs.http_log


def test_run_interrupted_before_the_index_refresh_recovers(runs: TrustRuns) -> None:
    """The first run writes the sources file, then dies reading the index (repository down).

    The next run finds the sources file unchanged. Before the fix it skipped
    the refresh (the index was "fresh" by cache_valid_time) and failed with no
    installation candidate for the driver, for an hour.
    """
    first, second = runs.interrupted.first, runs.interrupted.second
    refresh = "repo_trust : Read the index of NVIDIA's CUDA repository"
    assert first.returncode != 0
    assert "index" in first.failed_task, first.explain()  # stopped at the refresh, not before
    # A download that failed is tried again, then named with its fix (a refusal is not retried).
    flat = " ".join(first.output.split())
    assert ("apt-get update could not download the index of NVIDIA's CUDA repository after 4"
            " tries") in flat, first.explain()
    assert "check the host's network, proxy and DNS" in flat
    assert ".. Nothing was installed" not in flat
    assert runs.interrupted.sources_written, (
        "the first run should have written the sources file before it stopped")
    assert second.returncode == 0, second.explain()
    assert _task_status(second.output, refresh) == "changed", second.explain()
    assert runs.interrupted.smi_installed, (
        "the driver (nvidia-smi) was not installed by the second run")


def test_another_repository_that_apt_refuses_stops_the_play_at_once_naming_it(
        runs: TrustRuns) -> None:
    """A host's own third-party repository whose signature apt refuses (a vendor's expired or
    rotated key is the common case). The role's first index read (Debian's contrib component
    here) stops the play at once with apt's line, which names that repository, and the fix.
    Before, the apt module's update_cache retried it five times with growing pauses (about
    half a minute) and failed with apt's lines run together."""
    scenario = runs.other_repository
    run = scenario.run
    assert run.returncode != 0
    assert run.failed_task == ("repo_trust : Stop when apt did not read the index of Debian's"
                               " contrib component"), run.explain()
    flat = " ".join(run.output.split())
    assert ("apt refused a repository while reading the index of Debian's contrib component (not"
            " retried") in flat, run.explain()
    assert "/other-vendor" in flat and ("NO_PUBKEY" in flat or "not signed" in flat)
    assert "fix or remove that entry on the host" in flat
    assert ".. Nothing was installed" not in flat  # apt's own full stop is not doubled
    assert "Sleeping for" not in run.output and "FAILED - RETRYING" not in run.output, (
        run.explain())
    assert not scenario.driver_installed


def test_no_root_through_user_owned_paths(runs: TrustRuns) -> None:
    """~/.docker -> /etc/docker, and a venv its owner can change: root follows neither.

    Before the fix the ngc role created ~/.docker as root, following the link
    (chowning /etc/docker to the user), and tensorflow_host ran the venv's pip
    and python as root.
    """
    symlinks = runs.symlinks
    ngc, venv_run, ran_as = symlinks.ngc, symlinks.venv_run, symlinks.ran_as
    # What an attacker gets, first: /etc/docker stays root's, root runs nothing of the user's.
    assert symlinks.etc_docker == ["root", "755"], "the ngc role followed the user's symlink"
    assert "config.json" not in symlinks.etc_docker_files
    assert ran_as, "neither pip nor python of the venv ran: nothing was checked"
    assert set(ran_as) == {symlinks.user_uid}, f"the venv's programs ran as uids {ran_as}"
    # Then how: the ngc role refuses the symlink in one clear message; the venv run succeeds.
    assert ngc.returncode != 0
    assert ngc.failed_task == "ngc : Refuse a Docker config that is a symlink or not the user's own"
    flat = " ".join(ngc.output.split())
    assert f"/home/{TEST_USER}/.docker is a symlink to /etc/docker" in flat
    assert venv_run.returncode == 0, venv_run.explain()
