"""Repository trust on the Rocky 9 stand-in: what rpm imports.

One container (tests/ansible/rocky.py: Debian's dnf 4 and rpm behind Rocky's
identity), one run of the driver role: the CUDA key file is the vendor's with
the mirror's key appended as a second armored block, and the CUDA repository's
rpms and repomd.xml are the ones the appended key signed. The play must refuse
the key file before rpm imports anything or a .repo file is written, and never
fetch that repository. (A host whose .repo files the vendors' guides wrote is
the brownfield Rocky stand-in of test_platforms.py.)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
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
from tests.fixtures.aptrepo.signing import SigningKey, generate_key
from tests.fixtures.rpmrepo import CUDA_DIR, CUDA_KEY_NAME, build_rpm_repos, serve_directory
from tests.fixtures.rpmrepo.catalog import cuda_repository
from tests.fixtures.rpmrepo.modules import modules_yaml
from tests.support.background import AFTER_RUN_LAST, set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

APPENDED = Path("appended") / CUDA_KEY_NAME
EVIL = Path("evil")


@dataclass
class RockyTrust:
    """What the refused run did, and what the host looked like before and after."""

    appended: PlaybookRun
    rpm_keys_before: list[str]
    rpm_keys_after_refusal: list[str]
    written_after_refusal: list[str]
    evil_requests: list[str]
    extra_fingerprint: str
    pinned_fingerprint: str


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


@contextmanager
def _rocky_trust_runs(workdir: Path) -> Iterator[RockyTrust]:
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
        finally:
            host.remove()
    yield RockyTrust(appended, keys_before, keys_after, written, evil_requests,
                     extra.fingerprint, repos.cuda_fingerprint)


# A self-contained set-up: a background job queued behind the converges, its tests after
# theirs (tests/support/background.py, AFTER_RUN_LAST).
rocky_trust = pytest.fixture(scope="module", name="rocky_trust")(set_up_in_background(
    __file__, "trust-rocky", _rocky_trust_runs, ensure_engine, run_last=AFTER_RUN_LAST))


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
            and f"holds the pinned key {rocky_trust.pinned_fingerprint} and also "
            f"{rocky_trust.extra_fingerprint};" in flat), run.explain()
    assert rocky_trust.rpm_keys_after_refusal == rocky_trust.rpm_keys_before
    assert "RPM-GPG-KEY-nvidia-cuda" not in rocky_trust.written_after_refusal
    assert "cuda-rhel9-x86_64.repo" not in rocky_trust.written_after_refusal
    assert rocky_trust.evil_requests == []

