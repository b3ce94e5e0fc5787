"""Repository trust on the Rocky 9 stand-in: what rpm imports, and a host's own .repo files.

One container (tests/ansible/rocky.py: Debian's dnf 4 and rpm behind Rocky's
identity), three runs of the roles that add repositories:

1. The CUDA key file is the vendor's with the mirror's key appended as a second
   armored block, and the CUDA repository's rpms and repomd.xml are the ones the
   appended key signed. The play must refuse the key file before rpm imports
   anything or a .repo file is written, and never fetch that repository.
2. The host was set up by the vendors' guides first (tests/fixtures/vendor_repos):
   NVIDIA's cuda-rhel9.repo, Docker's docker-ce.repo and NVIDIA's
   nvidia-container-toolkit.repo, pointing at the stub repositories. The driver,
   Docker and toolkit roles must replace their sections (one line per file), leave
   every other section, and leave dnf with one definition of each repository.
3. The re-run changes nothing.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.ansible.lab import CONTAINER_VARS
from tests.ansible.platforms import ROCKY9
from tests.ansible.playbook import PlaybookRun, run_playbook, write_inventory
from tests.ansible.rocky import prepare_rocky, rocky_image, rocky_vars
from tests.ansible.target import start_target
from tests.ansible.timings import record_timing
from tests.fixtures import vendor_repos
from tests.fixtures.aptrepo.signing import SigningKey, generate_key
from tests.fixtures.rpmrepo import CUDA_DIR, CUDA_KEY_NAME, build_rpm_repos, serve_directory
from tests.fixtures.rpmrepo.catalog import cuda_repository
from tests.fixtures.rpmrepo.modules import modules_yaml

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

TAGS = "nvidia_driver,docker,nvidia_container_toolkit"
APPENDED = Path("appended") / CUDA_KEY_NAME
EVIL = Path("evil")


@dataclass
class RockyTrust:
    """What the three runs did, and what the host looked like after each."""

    appended: PlaybookRun
    rpm_keys_before: list[str]
    rpm_keys_after_refusal: list[str]
    written_after_refusal: list[str]
    evil_requests: list[str]
    extra_fingerprint: str
    seeded: dict[str, str]
    converge: PlaybookRun
    repo_files: dict[str, str]
    repolist: subprocess.CompletedProcess[str]
    rerun: PlaybookRun


def _evil_cuda_repository(root: Path, extra: SigningKey, pinned_key: str) -> None:
    """The CUDA repository re-signed by the mirror's key, and the key file with it appended."""
    evil = root / EVIL / CUDA_DIR
    shutil.copytree(root / CUDA_DIR, evil)
    shutil.rmtree(evil / "repodata")
    extra.sign_rpms(sorted(evil.glob("*.rpm")))
    subprocess.run(["createrepo_c", "--quiet", "--general-compress-type=gz", str(evil)],
                   check=True, capture_output=True)
    with tempfile.TemporaryDirectory(prefix="modules-") as tmp:
        source = Path(tmp) / "modules.yaml"
        source.write_text(modules_yaml(cuda_repository()))
        subprocess.run(["modifyrepo_c", "--mdtype=modules", str(source), str(evil / "repodata")],
                       check=True, capture_output=True)
    extra.detach_sign(evil / "repodata" / "repomd.xml")
    (root / APPENDED).parent.mkdir(parents=True)
    (root / APPENDED).write_text(pinned_key + extra.public_armored)


@pytest.fixture(scope="module")
def rocky_trust(docker_host: str, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[RockyTrust]:
    workdir = tmp_path_factory.mktemp("trust-rocky")
    repos = build_rpm_repos(workdir / "rpmrepos")
    with tempfile.TemporaryDirectory(prefix="trust-rocky-gpg-") as keys:
        extra = generate_key(Path(keys) / "mirror", "mirror's own key <mirror@example.invalid>")
        try:
            _evil_cuda_repository(repos.root, extra,
                                  (repos.root / CUDA_DIR / CUDA_KEY_NAME).read_text())
        finally:
            extra.close()
    image = rocky_image()
    http_log = workdir / "rpmrepo-http.log"
    with serve_directory(repos.root, http_log) as base_url:
        variables = workdir / "vars.yml"
        variables.write_text(yaml.safe_dump({**CONTAINER_VARS, **rocky_vars(repos, base_url)}))
        host = start_target(image, f"tfhost-trust-rocky-{os.getpid()}", ROCKY9)
        try:
            prepare_rocky(host, repos, base_url)
            inventory = write_inventory(workdir / "inventory.yml", host.name)

            def rpm_keys() -> list[str]:
                return sorted(host.exec("rpm", "-q", "gpg-pubkey", check=False).stdout.split())

            keys_before = rpm_keys()
            appended = run_playbook(inventory, [variables, _extra(workdir, "appended.yml", {
                "nvidia_driver_cuda_repo_base_url": f"{base_url}/{EVIL}/compute/cuda/repos",
                "nvidia_driver_cuda_repo_key_url": f"{base_url}/{APPENDED}"})],
                workdir / "appended.log", "--tags", "nvidia_driver")
            keys_after = rpm_keys()
            written = host.exec("sh", "-c", "ls /etc/yum.repos.d/ /etc/pki/rpm-gpg/").stdout.split()
            evil_requests = [line for line in http_log.read_text().splitlines()
                             if f"/{EVIL}/" in line]

            seeded = {}
            for entry in (vendor_repos.cuda_repo(f"{base_url}/{CUDA_DIR}"),
                          vendor_repos.docker_ce_repo(f"{base_url}/linux/centos"),
                          vendor_repos.toolkit_repo(f"{base_url}/libnvidia-container")):
                host.exec("tee", entry.path, stdin=entry.content)
                seeded[entry.path] = entry.content
            # As the guides' `dnf install -y` leaves a host: the metadata read, and the toolkit
            # repository's key (its gpgkey URL) accepted for repo_gpgcheck.
            host.exec("dnf", "-y", "-q", "makecache")
            converge = run_playbook(inventory, [variables], workdir / "converge.log",
                                    "--tags", TAGS)
            repo_files = {
                path: host.exec("cat", path, check=False).stdout
                for path in host.exec("sh", "-c", "ls /etc/yum.repos.d/*.repo").stdout.split()}
            repolist = host.exec("dnf", "repolist", "--enabled", check=False)
            rerun = run_playbook(inventory, [variables], workdir / "rerun.log", "--tags", TAGS)
        finally:
            host.remove()
    yield RockyTrust(appended, keys_before, keys_after, written, evil_requests,
                     extra.fingerprint, seeded, converge, repo_files, repolist, rerun)


def _extra(workdir: Path, name: str, variables: dict[str, str]) -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(variables))
    return path


def test_an_appended_key_block_is_refused_before_rpm_imports_anything(
        rocky_trust: RockyTrust) -> None:
    """Before the fix only the first block was read and the whole file went to rpm --import."""
    run = rocky_trust.appended
    record_timing("trust rocky: appended key refused", run.seconds)
    assert run.returncode != 0, run.explain()
    assert run.failed_task == "repo_trust : Check the key file (the pinned key and nothing else)", (
        run.explain())
    flat = " ".join(run.output.split())
    assert ("Refusing NVIDIA's CUDA repository: the key file at" in flat
            and "holds 2 armored blocks where the vendor's file has one" in flat), run.explain()
    assert rocky_trust.rpm_keys_after_refusal == rocky_trust.rpm_keys_before
    assert "RPM-GPG-KEY-nvidia-cuda" not in rocky_trust.written_after_refusal
    assert "cuda-rhel9-x86_64.repo" not in rocky_trust.written_after_refusal
    assert rocky_trust.evil_requests == []


def test_the_vendors_repo_files_are_replaced_one_line_each(rocky_trust: RockyTrust) -> None:
    run = rocky_trust.converge
    record_timing("trust rocky: vendor-set-up host, first run", run.seconds)
    assert run.returncode == 0, run.explain()
    flat = " ".join(run.output.split())
    assert ("Replaced /etc/yum.repos.d/cuda-rhel9.repo (repository [cuda-rhel9-x86_64]; gpgkey "
            in flat), run.explain()
    assert ("Replaced the repository [docker-ce-stable] in /etc/yum.repos.d/docker-ce.repo "
            in flat), run.explain()
    # NVIDIA's file has the role's own name: yum_repository rewrites the section, the line says so.
    assert ("Replacing /etc/yum.repos.d/nvidia-container-toolkit.repo (repository "
            "[nvidia-container-toolkit]; gpgkey " in flat), run.explain()
    files = rocky_trust.repo_files
    assert "/etc/yum.repos.d/cuda-rhel9.repo" not in files
    docker = files["/etc/yum.repos.d/docker-ce.repo"]
    assert "[docker-ce-stable]" not in docker
    assert docker.count("[docker-ce-") == 4  # debuginfo, source, test, nightly: kept
    toolkit = configparser.ConfigParser()
    toolkit.read_string(files["/etc/yum.repos.d/nvidia-container-toolkit.repo"])
    assert sorted(toolkit.sections()) == [
        "nvidia-container-toolkit", "nvidia-container-toolkit-experimental"]
    assert toolkit["nvidia-container-toolkit"]["gpgkey"] == (
        "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit")


def test_dnf_reads_one_definition_of_each_repository(rocky_trust: RockyTrust) -> None:
    listing = rocky_trust.repolist
    assert listing.returncode == 0, listing.stderr
    assert "listed more than once" not in listing.stderr, listing.stderr
    ids = [line.split()[0] for line in listing.stdout.splitlines()[1:] if line.strip()]
    for repo_id in ("cuda-rhel9-x86_64", "docker-ce-stable", "nvidia-container-toolkit"):
        assert ids.count(repo_id) == 1, listing.stdout


def test_the_rerun_changes_nothing(rocky_trust: RockyTrust) -> None:
    run = rocky_trust.rerun
    record_timing("trust rocky: vendor-set-up host, re-run", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()
