"""The same suite on every OS stand-in: facts, converge, re-run, check mode, testinfra.

test_site.py runs these assertions (and the negative cases) on the Debian 12
container; this module runs them on each stand-in of tests/ansible/platforms.py,
one OS at a time: one container converges, re-runs and gets tests/infra; a
second, fresh one gets --check. tests/README.md says what a stand-in makes
real and what it does not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.fake_registry import fake_registry
from tests.ansible.lab import CHECK_MODE_WITNESSES, Lab
from tests.ansible.platforms import STAND_INS, Platform
from tests.ansible.playbook import (
    ANSIBLE_DIR,
    BIN,
    EXAMPLE_NGC_API_KEY,
    REPO,
    PlaybookRun,
    run_playbook,
    write_inventory,
)
from tests.ansible.target import TargetHost, start_target, target_image
from tests.ansible.timings import record_timing
from tests.fixtures.aptrepo import build_stub_repos, serve_directory

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(3600)]


@dataclass
class PlatformRun:
    """What the suite saw on one stand-in."""

    platform: Platform
    lab: Lab
    host: TargetHost
    inventory: Path
    facts: dict[str, str]
    first: PlaybookRun
    second: PlaybookRun
    check: PlaybookRun
    pristine_after_check: dict[str, bool]


@pytest.fixture(scope="module")
def platform_lab(docker_host: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """Stub repositories (every OS's layout), the fake NGC registry and the target image."""
    workdir = tmp_path_factory.mktemp("platforms")
    repos = build_stub_repos(workdir / "repos")
    image = target_image()
    with serve_directory(repos.root, workdir / "repo-http.log") as base_url, \
            fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY) as registry:
        yield Lab(workdir, repos, base_url, registry.address, image)


def _facts(inventory: Path, host: str) -> dict[str, str]:
    """What Ansible's fact gathering calls the host (distribution, version, family, pkg_mgr)."""
    wanted = ["ansible_distribution", "ansible_distribution_version", "ansible_os_family",
              "ansible_pkg_mgr"]
    tree = inventory.with_suffix(".facts")
    result = subprocess.run(
        [str(BIN / "ansible"), "-i", str(inventory), host, "-m", "ansible.builtin.setup",
         "-a", json.dumps({"filter": wanted}), "--tree", str(tree)],
        cwd=ANSIBLE_DIR, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
             "ANSIBLE_NOCOLOR": "1"},
    )
    if result.returncode != 0 or not (tree / host).exists():
        raise RuntimeError(f"fact gathering failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    facts = json.loads((tree / host).read_text())["ansible_facts"]
    return {key.removeprefix("ansible_"): str(facts.get(key, "")) for key in wanted}


# Ubuntu 22.04 is defined like 24.04 but has not yet finished a run: opt-in
# (TFHOST_UBUNTU2204=1) until it has, so the suite stays within its time budget.
OPT_IN = {"ubuntu2204": "TFHOST_UBUNTU2204"}
PARAMS = [
    pytest.param(platform, id=platform.key, marks=pytest.mark.skipif(
        platform.key in OPT_IN and os.environ.get(OPT_IN.get(platform.key, "")) != "1",
        reason=f"{platform.key} is opt-in ({OPT_IN.get(platform.key)}=1) until it has passed "
               "a full run; see tests/README.md"))
    for platform in STAND_INS
]


@pytest.fixture(scope="module", params=PARAMS)
def platform_run(request: pytest.FixtureRequest, platform_lab: Lab) -> Iterator[PlatformRun]:
    """Converge + re-run on one container of this OS; --check on a second, fresh one."""
    platform: Platform = request.param
    lab = platform_lab
    suffix = f"{platform.key}-{os.getpid()}"
    host = start_target(lab.target_image, f"tfhost-ans-{suffix}", platform)
    fresh: TargetHost | None = None
    try:
        inventory = write_inventory(lab.path(f"{suffix}.inventory.yml"), host.name)
        facts = _facts(inventory, host.name)
        first = run_playbook(inventory, [lab.vars_file], lab.path(f"{suffix}-converge-1.log"))
        second = run_playbook(inventory, [lab.vars_file], lab.path(f"{suffix}-converge-2.log"))
        fresh = start_target(lab.target_image, f"tfhost-ans-fresh-{suffix}", platform)
        fresh_inventory = write_inventory(lab.path(f"fresh-{suffix}.inventory.yml"), fresh.name)
        check = run_playbook(fresh_inventory, [lab.vars_file], lab.path(f"{suffix}-check.log"),
                             "--check")
        pristine = {path: fresh.exec("test", "-e", path, check=False).returncode != 0
                    for path in CHECK_MODE_WITNESSES}
        fresh.remove()
        fresh = None
        yield PlatformRun(platform, lab, host, inventory, facts, first, second, check, pristine)
    finally:
        if fresh is not None:
            fresh.remove()
        host.remove()


def test_facts_identify_the_stand_in_as_its_os(platform_run: PlatformRun) -> None:
    platform = platform_run.platform
    assert platform_run.facts == {
        "distribution": platform.distribution,
        "distribution_version": platform.version,
        "os_family": platform.os_family,
        "pkg_mgr": platform.pkg_mgr,
    }


def test_first_converge_succeeds(platform_run: PlatformRun) -> None:
    run = platform_run.first
    record_timing(f"{platform_run.platform.key}: first converge", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["failed"] == 0 and run.recap["changed"] > 0


def test_second_run_changes_nothing(platform_run: PlatformRun) -> None:
    run = platform_run.second
    record_timing(f"{platform_run.platform.key}: idempotent re-run", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()


def test_the_play_used_this_os_repository(platform_run: PlatformRun) -> None:
    """The CUDA source is NVIDIA's directory for this OS (ubuntu2404/x86_64, ...)."""
    source = platform_run.host.read("/etc/apt/sources.list.d/nvidia-cuda.list")
    assert f"/compute/cuda/repos/{platform_run.platform.cuda_repo_distro}/x86_64/ /" in source


def test_ubuntu_driver_packages_are_the_branch_named_headless_set(
        platform_run: PlatformRun) -> None:
    """Ubuntu's compute-only set for branch 570, open modules, installed and held."""
    if platform_run.platform.distribution != "Ubuntu":
        pytest.skip("Ubuntu names its driver packages by branch")
    host = platform_run.host
    status = host.exec("dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Want}\\n",
                       "nvidia-*").stdout
    installed = {line.split()[0]: line.split()[1:] for line in status.splitlines()
                 if len(line.split()) == 3}
    for name in ("nvidia-headless-570-open", "nvidia-dkms-570-open", "nvidia-utils-570",
                 "nvidia-compute-utils-570", "nvidia-kernel-source-570-open"):
        assert name in installed, f"{name} is not installed: {sorted(installed)}"
        version, want = installed[name]
        assert version.startswith("570."), f"{name} {version}"
        assert want == "hold", f"{name} is not held ({want})"
    assert "nvidia-headless-570" not in installed  # the proprietary flavour stayed out


def test_check_mode_passes_on_a_fresh_host(platform_run: PlatformRun) -> None:
    run = platform_run.check
    record_timing(f"{platform_run.platform.key}: check mode (fresh container)", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["failed"] == 0


def test_check_mode_changed_nothing(platform_run: PlatformRun) -> None:
    assert platform_run.pristine_after_check == dict.fromkeys(CHECK_MODE_WITNESSES, True)


def test_testinfra_suite_passes_on_the_converged_host(platform_run: PlatformRun) -> None:
    assert platform_run.first.returncode == 0, "converge failed; see test_first_converge_succeeds"
    env = {**os.environ, "TFHOST_NGC_API_KEY": EXAMPLE_NGC_API_KEY}
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/infra", f"--hosts=docker://{platform_run.host.name}",
         "--tfhost-vars", str(platform_run.lab.vars_file), "-p", "no:cacheprovider", "-q", "-rs"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    summary = suite.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary

