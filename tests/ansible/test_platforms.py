"""The same suite on every OS stand-in: facts, converge, re-run, check mode, testinfra.

test_site.py runs these assertions (and the negative cases) on the Debian 12
container; this module runs them on each stand-in of tests/ansible/platforms.py,
one OS at a time: one container converges, re-runs and gets tests/infra; a
second, fresh one gets --check. tests/README.md says what a stand-in makes
real and what it does not.

Brownfield hosts (tests/ansible/brownfield.py): most hosts the play meets were
set up by the vendors' guides first (cuda-keyring's list, Docker's and the
toolkit's entries, an older driver branch installed and held or locked, a
daemon.json of the site's). One Debian-family and one dnf stand-in start in that
state; --check then runs on that same host (it must report the replacements
and change no file under /etc, no package, no hold), then the converge, the
re-run and tests/infra.

* Ubuntu 24.04 is converted, not added: 22.04 runs the same tasks on a fresh
  host (fresh --check, fresh converge of branch 580, the 580 -> 590 branch
  upgrade), so nothing fresh is lost, and the 24.04 host's first converge is
  itself a 580 -> 590 move from NVIDIA's branch-named packages to its
  unversioned ones and its pinning package, from holds the site set. It also
  saves 24.04's second (fresh) container and its --check.
* Rocky 9 brownfield is added beside the fresh Rocky host: the fresh host's
  tests need what only a fresh host shows (the compute-only set with no desktop
  package, the role's own locks moved by the 570 -> 575 upgrade and the flavour
  change, the EPEL, kernel-devel and interrupted-run cases on a second fresh
  container), while NVIDIA's guide leaves the desktop packages and the site's
  own locks, which those assertions cannot hold on. After its converge, the
  Rocky brownfield host is asked back to 580 with a package of the site's that
  needs 590's build: the play stops before any change, naming that package.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.brownfield import (
    NEW_BRANCH,
    OLD_BRANCH,
    USER_DAEMON_SETTING,
    Seeded,
    brownfield_vars,
    differences,
    installed_nvidia_debs,
    prepare_apt,
    prepare_dnf,
    snapshot,
)
from tests.ansible.fake_registry import fake_registry
from tests.ansible.lab import CHECK_MODE_WITNESSES, UPGRADE_TAGS, UPGRADE_VARS, Lab
from tests.ansible.platforms import ROCKY9, UBUNTU2204, UBUNTU2404, Platform
from tests.ansible.playbook import (
    ANSIBLE_DIR,
    BIN,
    EXAMPLE_NGC_API_KEY,
    REPO,
    PlaybookRun,
    run_playbook,
    write_inventory,
)
from tests.ansible.rocky import (
    RPM_CHECK_MODE_WITNESSES,
    prepare_rocky,
    rocky_image,
    rocky_vars,
    standin_docker_image,
)
from tests.ansible.target import (
    PREEXISTING_DAEMON_JSON,
    TargetHost,
    docker,
    start_target,
    target_image,
)
from tests.ansible.timings import record_timing
from tests.fixtures.aptrepo import build_stub_repos, serve_directory
from tests.fixtures.aptrepo.dockerce import build_docker_ce_repo
from tests.fixtures.aptrepo.signing import generate_key
from tests.fixtures.rpmrepo import RpmRepos, build_rpm_repos
from tests.fixtures.rpmrepo.catalog import DRIVER_VERSIONS as RPM_DRIVER_VERSIONS
from tests.fixtures.rpmrepo.rpms import StubRpm, build_rpms
from tests.support.background import BackgroundJobs, JobContext, background_job
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(3600)]


@dataclass(frozen=True)
class StandIn:
    """One OS stand-in, fresh or set up by the vendors' guides first."""

    platform: Platform
    brownfield: bool = False

    @property
    def key(self) -> str:
        return self.platform.key + ("-brownfield" if self.brownfield else "")


# Ubuntu 22.04 and Rocky 9 fresh; Ubuntu 24.04 and a second Rocky 9 brownfield (see above).
STAND_INS = [StandIn(UBUNTU2204), StandIn(UBUNTU2404, brownfield=True), StandIn(ROCKY9),
             StandIn(ROCKY9, brownfield=True)]


@dataclass
class Brownfield:
    """What the vendors' guides left on the host, and the host around its --check run."""

    seeded: Seeded
    before_check: dict[str, str]
    after_check: dict[str, str]


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
    vars_files: list[Path]
    # RedHat family: the driver step on the fresh host with nvidia_driver_epel false,
    # and the driver package's version-release after it ('' when not installed).
    epel_off: PlaybookRun | None = None
    epel_off_driver: str = ""
    # RedHat family, default kernel headers: the driver step with only the CI machine's kernel
    # running (no kernel-devel for it anywhere), then again once Rocky's kernel is installed.
    headers_gone: PlaybookRun | None = None
    headers_newest: PlaybookRun | None = None
    kernel_devel: str = ""
    # RedHat family, issue 14 item 4: the driver step on the fresh host while the CUDA
    # repository's metadata cannot be read (after its .repo is written); the next run
    # (headers_newest) must refresh and install. The driver package after that run.
    interrupted: PlaybookRun | None = None
    interrupted_wrote_repo: bool = False
    recovered_driver: str = ""
    # A brownfield stand-in: --check ran on this host (not a fresh one) before the converge.
    brownfield: Brownfield | None = None

    @property
    def key(self) -> str:
        return self.platform.key + ("-brownfield" if self.brownfield else "")


@dataclass
class PlatformLab:
    """The Debian-family lab, plus the EL9 rpm repositories on their own loopback server."""

    lab: Lab
    rpm_repos: RpmRepos
    rpm_base_url: str
    docker_fingerprint: str


@contextmanager
def open_platform_lab(workdir: Path) -> Iterator[PlatformLab]:
    """Stub repositories (every OS's layout), the fake NGC registry and the target image.

    Docker CE's Ubuntu 24.04 repository (its plugins) is there for the brownfield host.
    """
    repos = build_stub_repos(workdir / "repos")
    docker_key = generate_key(workdir / "docker-gpg", "Docker Release (CE deb) stub"
                              " <docker@example.invalid>")
    try:
        build_docker_ce_repo(repos.root, docker_key, suite="noble")
    finally:
        docker_key.close()
    rpm_repos = build_rpm_repos(workdir / "rpmrepos")
    image = target_image()
    with serve_directory(repos.root, workdir / "repo-http.log") as base_url, \
            serve_directory(rpm_repos.root, workdir / "rpmrepo-http.log") as rpm_base_url, \
            fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY) as registry:
        yield PlatformLab(Lab(workdir, repos, base_url, registry.address, image), rpm_repos,
                          rpm_base_url, docker_key.fingerprint)


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


PARAMS = [pytest.param(stand_in, id=stand_in.key) for stand_in in STAND_INS]
CUDA_RPM_REPO = "compute/cuda/repos/rhel9/x86_64"


def _interrupted_run(host: TargetHost, inventory: Path, vars_files: list[Path], rpm_root: Path,
                     log: Path) -> tuple[PlaybookRun, bool]:
    """The driver step while the CUDA repository serves its key but not its metadata.

    The run writes /etc/yum.repos.d/cuda-rhel9-x86_64.repo, then stops when dnf
    cannot read the repository's index (a mirror down mid-run, or ^C there).
    Returns the run and whether the .repo file was written.
    """
    repodata = rpm_root / CUDA_RPM_REPO / "repodata"
    offline = repodata.with_name("repodata.offline")
    repodata.rename(offline)
    try:
        run = run_playbook(inventory, vars_files, log, "--tags", "nvidia_driver")
    finally:
        offline.rename(repodata)
    written = host.exec("test", "-e", "/etc/yum.repos.d/cuda-rhel9-x86_64.repo",
                        check=False).returncode == 0
    return run, written


@contextmanager
def stand_in_run(stand_in: StandIn, platform_lab: PlatformLab,
                 on_host: Callable[[TargetHost], object] = lambda host: None,
                 ) -> Iterator[PlatformRun]:
    """Converge + re-run on one container of this OS; --check on a second, fresh one.

    A brownfield stand-in gets --check on its own host first, before the converge.
    `on_host` is told of each container as it starts (a background job stops them
    if the session ends early). The containers are removed on leaving.
    """
    platform = stand_in.platform
    lab = platform_lab.lab
    suffix = f"{stand_in.key}-{os.getpid()}"
    rpm_based = platform.pkg_mgr == "dnf"
    # The Ubuntu brownfield host gets Docker CE from Docker's stub repository, whose engine
    # wraps Debian's docker files under /opt/standin (tests/fixtures/aptrepo/dockerce.py).
    image = (rocky_image() if rpm_based
             else standin_docker_image() if stand_in.brownfield else lab.target_image)
    vars_files = [lab.vars_file]
    if rpm_based:
        vars_files.append(lab.extra_vars_file(f"{suffix}-vars.yml", rocky_vars(
            platform_lab.rpm_repos, platform_lab.rpm_base_url)))
    if stand_in.brownfield:
        vars_files.append(lab.extra_vars_file(f"{suffix}-site.yml", brownfield_vars(
            platform, lab.base_url, platform_lab.docker_fingerprint)))

    def start(name: str) -> TargetHost:
        target = start_target(image, name, platform)
        on_host(target)
        if rpm_based:
            try:
                prepare_rocky(target, platform_lab.rpm_repos, platform_lab.rpm_base_url)
            except Exception:
                target.remove()
                raise
        return target

    host = start(f"tfhost-ans-{suffix}")
    fresh: TargetHost | None = None
    try:
        inventory = write_inventory(lab.path(f"{suffix}.inventory.yml"), host.name)
        facts = _facts(inventory, host.name)
        if stand_in.brownfield:
            brownfield, check = _brownfield_check(host, stand_in, platform_lab, inventory,
                                                  vars_files, lab.path(f"{suffix}-check.log"))
        first = run_playbook(inventory, vars_files, lab.path(f"{suffix}-converge-1.log"))
        second = run_playbook(inventory, vars_files, lab.path(f"{suffix}-converge-2.log"))
        if stand_in.brownfield:
            yield PlatformRun(platform, lab, host, inventory, facts, first, second, check, {},
                              vars_files, brownfield=brownfield)
            return
        fresh = start(f"tfhost-ans-fresh-{suffix}")
        fresh_inventory = write_inventory(lab.path(f"fresh-{suffix}.inventory.yml"), fresh.name)
        check = run_playbook(fresh_inventory, vars_files, lab.path(f"{suffix}-check.log"),
                             "--check")
        witnesses = CHECK_MODE_WITNESSES + (RPM_CHECK_MODE_WITNESSES if rpm_based else [])
        pristine = {path: fresh.exec("test", "-e", path, check=False).returncode != 0
                    for path in witnesses}
        epel_off, epel_off_driver = None, ""
        headers_gone, headers_newest, kernel_devel = None, None, ""
        interrupted, interrupted_wrote_repo, recovered_driver = None, False, ""
        if rpm_based:
            epel_off = run_playbook(
                fresh_inventory,
                [*vars_files, lab.extra_vars_file("epel-off.yml", {"nvidia_driver_epel": False})],
                lab.path(f"{suffix}-epel-off.log"), "--tags", "nvidia_driver")
            driver = fresh.exec("rpm", "-q", "nvidia-driver-cuda", check=False)
            epel_off_driver = driver.stdout.strip() if driver.returncode == 0 else ""
            headers = [*vars_files, lab.extra_vars_file(
                "default-headers.yml", {"nvidia_driver_kernel_headers_packages": []})]
            headers_gone = run_playbook(fresh_inventory, headers,
                                        lab.path(f"{suffix}-headers-gone.log"),
                                        "--tags", "nvidia_driver")
            fresh.exec("dnf", "-q", "-y", "install", "kernel-core")
            interrupted, interrupted_wrote_repo = _interrupted_run(
                fresh, fresh_inventory, headers, platform_lab.rpm_repos.root,
                lab.path(f"{suffix}-interrupted.log"))
            # The next run: the repository answers again; it must refresh and install.
            headers_newest = run_playbook(fresh_inventory, headers,
                                          lab.path(f"{suffix}-headers-newest.log"),
                                          "--tags", "nvidia_driver")
            devel = fresh.exec("rpm", "-q", "kernel-devel", check=False)
            kernel_devel = devel.stdout.strip() if devel.returncode == 0 else ""
            driver = fresh.exec("rpm", "-q", "nvidia-driver-cuda", check=False)
            recovered_driver = driver.stdout.strip() if driver.returncode == 0 else ""
        fresh.remove()
        fresh = None
        yield PlatformRun(platform, lab, host, inventory, facts, first, second, check, pristine,
                          vars_files, epel_off, epel_off_driver, headers_gone, headers_newest,
                          kernel_devel, interrupted, interrupted_wrote_repo, recovered_driver)
    finally:
        if fresh is not None:
            fresh.remove()
        host.remove()


def _job_name(stand_in: StandIn) -> str:
    return f"platforms-{stand_in.key}"


def _used_by(stand_in: StandIn) -> Callable[[pytest.Item], bool]:
    """Whether a test runs on `stand_in` (its `platform_run` parameter)."""
    def uses(item: pytest.Item) -> bool:
        callspec = getattr(item, "callspec", None)
        return callspec is not None and callspec.params.get("platform_run") == stand_in
    return uses


def _stand_in_job(stand_in: StandIn) -> Callable[[JobContext], PlatformRun]:
    def converge_in_the_background(job: JobContext) -> PlatformRun:
        ensure_engine()
        platform_lab = job.stack.enter_context(open_platform_lab(job.workdir))
        return job.stack.enter_context(stand_in_run(
            stand_in, platform_lab, on_host=lambda host: job.on_cancel(host.remove)))
    return converge_in_the_background


# Each stand-in's set-up (a brownfield one's guides' state and --check, the converge, the
# re-run, --check on a fresh container: 4-8 minutes each on two cores) is a background job
# with its own lab, and this module's tests run after every other test of the session
# (`run_last`): the four converges overlap the rest of the suite instead of adding to it,
# and their tests collect the results. tests/support/background.py.
for _stand_in in STAND_INS:
    background_job(__file__, name=_job_name(_stand_in), run_last=True,
                   needed_by=_used_by(_stand_in))(_stand_in_job(_stand_in))


@pytest.fixture(scope="module", params=PARAMS)
def platform_run(request: pytest.FixtureRequest,
                 background_jobs: BackgroundJobs) -> Iterator[PlatformRun]:
    """One stand-in's runs, from its background job; its hosts go when the module is done."""
    stand_in: StandIn = request.param
    with background_jobs.held(_job_name(stand_in)) as run:
        yield run


def _brownfield_check(host: TargetHost, stand_in: StandIn, platform_lab: PlatformLab,
                      inventory: Path, vars_files: list[Path],
                      log: Path) -> tuple[Brownfield, PlaybookRun]:
    """Set the host up as the vendors' guides do, then --check it, looking before and after."""
    started = time.monotonic()
    if stand_in.platform.pkg_mgr == "dnf":
        seeded = prepare_dnf(host, platform_lab.rpm_repos, platform_lab.rpm_base_url)
    else:
        seeded = prepare_apt(host, stand_in.platform, platform_lab.lab.repos,
                             platform_lab.lab.base_url)
    record_timing(f"{stand_in.key}: set up by the vendors' guides", time.monotonic() - started)
    before = snapshot(host)
    check = run_playbook(inventory, vars_files, log, "--check")
    return Brownfield(seeded, before, snapshot(host)), check


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
    record_timing(f"{platform_run.key}: first converge", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["failed"] == 0 and run.recap["changed"] > 0


def test_second_run_changes_nothing(platform_run: PlatformRun) -> None:
    run = platform_run.second
    record_timing(f"{platform_run.key}: idempotent re-run", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()


def test_the_play_used_this_os_repository(platform_run: PlatformRun) -> None:
    """The CUDA source is NVIDIA's directory for this OS (ubuntu2404/x86_64, rhel9/x86_64...)."""
    distro = platform_run.platform.cuda_repo_distro
    if platform_run.platform.pkg_mgr == "dnf":
        source = platform_run.host.read(f"/etc/yum.repos.d/cuda-{distro}-x86_64.repo")
        assert f"/compute/cuda/repos/{distro}/x86_64\n" in source
        return
    source = platform_run.host.read("/etc/apt/sources.list.d/nvidia-cuda.list")
    assert f"/compute/cuda/repos/{distro}/x86_64/ /" in source


# NVIDIA's Ubuntu compute-only set, open modules: named by branch up to 580, not from 590
# (the driver installation guide's "Ubuntu 590 package renames").
UBUNTU_SET = {"580": ["nvidia-headless-580-open", "nvidia-dkms-580-open", "nvidia-utils-580",
                      "nvidia-compute-utils-580", "nvidia-kernel-source-580-open",
                      "libnvidia-compute-580"],
              "590": ["libnvidia-compute", "nvidia-dkms-open", "nvidia-utils",
                      "nvidia-compute-utils", "nvidia-kernel-source-open",
                      "nvidia-kernel-common"]}


def _dpkg_nvidia(host: TargetHost) -> dict[str, tuple[str, str]]:
    """Installed NVIDIA packages: name -> (version, selection: install or hold)."""
    status = host.exec(
        "dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version} ${db:Status-Want}\\n",
        "nvidia-*", "libnvidia-*").stdout
    return {fields[1]: (fields[2], fields[3]) for fields in map(str.split, status.splitlines())
            if len(fields) == 4 and fields[0][1:] == "i"}


def _assert_ubuntu_branch(installed: dict[str, tuple[str, str]], branch: str,
                          pinning: str = "") -> None:
    """The branch's compute-only set is installed at its version and held; NVIDIA's pinning
    package (`pinning`, default that of the branch; 580 too) is there too, and nothing of the
    other branch is left."""
    for name in UBUNTU_SET[branch]:
        assert name in installed, f"{name} is not installed: {sorted(installed)}"
        version, want = installed[name]
        assert version.startswith(f"{branch}."), f"{name} {version}"
        assert want == "hold", f"{name} is not held ({want})"
    # The proprietary flavour stayed out.
    assert "nvidia-headless-580" not in installed and "nvidia-dkms" not in installed
    wanted = [pinning or f"nvidia-driver-pinning-{branch}"]  # 580 too, as NVIDIA's guide
    found = sorted(name for name in installed if name.startswith("nvidia-driver-pinning-"))
    assert found == wanted, found
    other = "580" if branch == "590" else "590"
    leftovers = sorted(name for name, (version, _) in installed.items()
                       if version.startswith(f"{other}.") or f"-{other}" in name)
    assert leftovers == [], f"packages of branch {other} are installed"


def test_ubuntu_driver_packages_are_the_compute_only_set_of_the_branch(
        platform_run: PlatformRun) -> None:
    """Ubuntu's compute-only set for the branch (580, named by branch; 590 on the brownfield
    host: the unversioned names and NVIDIA's pinning package), held."""
    if platform_run.platform.distribution != "Ubuntu":
        pytest.skip("Ubuntu's own package names")
    branch = NEW_BRANCH if platform_run.brownfield else OLD_BRANCH
    _assert_ubuntu_branch(_dpkg_nvidia(platform_run.host), branch)


def test_check_mode_passes(platform_run: PlatformRun) -> None:
    run = platform_run.check
    where = "brownfield host" if platform_run.brownfield else "fresh container"
    record_timing(f"{platform_run.key}: check mode ({where})", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["failed"] == 0


def test_check_mode_changed_nothing(platform_run: PlatformRun) -> None:
    if platform_run.brownfield:
        brownfield = platform_run.brownfield
        assert differences(brownfield.before_check, brownfield.after_check) == []
        return
    assert platform_run.pristine_after_check == dict.fromkeys(platform_run.pristine_after_check,
                                                              True)
    assert set(CHECK_MODE_WITNESSES) <= set(platform_run.pristine_after_check)


def test_testinfra_suite_passes_on_the_converged_host(platform_run: PlatformRun) -> None:
    assert platform_run.first.returncode == 0, "converge failed; see test_first_converge_succeeds"
    env = {**os.environ, "TFHOST_NGC_API_KEY": EXAMPLE_NGC_API_KEY}
    started = time.monotonic()
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/infra", f"--hosts=docker://{platform_run.host.name}",
         *[f"--tfhost-vars={path}" for path in platform_run.vars_files],
         "-p", "no:cacheprovider", "-q", "-rs"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False,
    )
    record_timing(f"{platform_run.key}: tests/infra", time.monotonic() - started)
    assert suite.returncode == 0, suite.stdout[-6000:] + suite.stderr[-2000:]
    summary = suite.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary, summary



# --- brownfield hosts: set up by the vendors' guides before the play ----------------------

def _brownfield(platform_run: PlatformRun) -> Brownfield:
    if platform_run.brownfield is None:
        pytest.skip("a check of a host the vendors' guides set up first")
    return platform_run.brownfield


def _replacement_lines(run: PlaybookRun) -> str:
    """What repo_trust's "Say which files were replaced" tasks printed, whitespace-flattened
    (the YAML result format may fold a long line); not the module's own result, which lists
    the same messages."""
    return " ".join(chunk for chunk in " ".join(run.output.split()).split("TASK [")
                    if chunk.startswith("repo_trust : Say which files were replaced"))


def _replacements(run: PlaybookRun, seeded: Seeded) -> dict[str, int]:
    """How many lines repo_trust printed for each vendor file."""
    said = _replacement_lines(run)
    # A file that held only the entry, the role's own file, a file with other entries kept;
    # in check mode the first two say "Would replace {path} (".
    forms = ("Replaced {path} (", "Replacing {path} (", "Would replace {path} (", "in {path} (")
    return {path: sum(said.count(form.format(path=path)) for form in forms)
            for path in seeded.repo_files}


def test_brownfield_check_reports_each_replacement_and_the_driver_change(
        platform_run: PlatformRun) -> None:
    """--check names every vendor file the converge will replace, and what it installs."""
    brownfield = _brownfield(platform_run)
    run = platform_run.check
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] > 0, "check mode reported nothing to change"
    said = _replacements(run, brownfield.seeded)
    assert said == dict.fromkeys(brownfield.seeded.repo_files, 1), said
    # It says what a real run would do, not that it did it.
    lines = _replacement_lines(run)
    assert "Replaced " not in lines and "Replacing " not in lines, lines
    flat = " ".join(run.output.split())
    assert "Check mode: the CUDA repository is not configured on this host yet" in flat
    # "... a real run installs libnvidia-compute, nvidia-dkms-open, ..." /
    # "enables nvidia-driver:590-open"
    driver = flat.split("Check mode: the CUDA repository", 1)[1][:400]
    assert ("nvidia-dkms-open" if platform_run.platform.pkg_mgr == "apt"
            else f"{NEW_BRANCH}-open") in driver, driver


def test_brownfield_converge_replaced_each_vendor_entry_in_one_line(
        platform_run: PlatformRun) -> None:
    brownfield = _brownfield(platform_run)
    run = platform_run.first
    assert run.returncode == 0, run.explain()
    said = _replacements(run, brownfield.seeded)
    assert said == dict.fromkeys(brownfield.seeded.repo_files, 1), said
    again = _replacements(platform_run.second, brownfield.seeded)
    assert not any(again.values()), f"the re-run replaced something again: {again}"
    flat = " ".join(run.output.split())
    # What each line says: a file the play removes, a section removed from a file that keeps
    # the vendor's other sections, and a file at the role's own path that its template rewrites.
    if platform_run.platform.pkg_mgr == "dnf":
        expected = ["Replaced /etc/yum.repos.d/cuda-rhel9.repo (repository [cuda-rhel9-x86_64];"
                    " gpgkey ",
                    "Replaced the repository [docker-ce-stable] in"
                    " /etc/yum.repos.d/docker-ce.repo ",
                    "Replacing /etc/yum.repos.d/nvidia-container-toolkit.repo (repository "
                    "[nvidia-container-toolkit]; gpgkey "]
    else:
        expected = ["Replaced /etc/apt/sources.list.d/cuda-ubuntu2404-x86_64.list (entry for ",
                    "Replaced /etc/apt/sources.list.d/docker.sources (entry for ",
                    "Replacing /etc/apt/sources.list.d/nvidia-container-toolkit.list (entry for "]
    for line in expected:
        assert line in flat, f"{line!r} not in the converge's output"


def test_brownfield_package_manager_reads_one_entry_per_repository(
        platform_run: PlatformRun) -> None:
    """apt: only the play's sources files, `apt-get update` clean. dnf: each id once, clean."""
    _brownfield(platform_run)
    host = platform_run.host
    if platform_run.platform.pkg_mgr == "apt":
        sources = host.exec("ls", "/etc/apt/sources.list.d/").stdout.split()
        assert sources == ["docker.list", "nvidia-container-toolkit.list", "nvidia-cuda.list"]
        update = host.exec("apt-get", "update", check=False)
        assert update.returncode == 0, update.stderr
        assert "W:" not in update.stderr and "E:" not in update.stderr, update.stderr
        versions = {name: host.exec("dpkg-query", "-W", "-f", "${db:Status-Abbrev}${Version}",
                                    name, check=False).stdout
                    for name in ("docker-ce", "containerd.io", "docker-compose-plugin",
                                 "docker.io", "docker-doc", "containerd", "runc")}
        # Docker CE from Docker's repository; the distribution's Docker removed first, as
        # Docker's guide's "Uninstall old versions" (docker-doc conflicts with nothing:
        # before the fix it stayed).
        assert versions["docker-ce"].startswith("ii 5:28.3.2"), versions
        assert versions["containerd.io"].startswith("ii 1.7.27"), versions
        assert versions["docker-compose-plugin"].startswith("ii 2.38.2"), versions
        gone = {name: versions[name] for name in ("docker.io", "docker-doc", "containerd", "runc")
                if versions[name].startswith("ii")}
        assert gone == {}, f"the distribution's Docker is still installed: {gone}"
        return
    refresh = host.exec("dnf", "-q", "makecache", "--refresh", check=False)
    assert refresh.returncode == 0, refresh.stderr
    assert refresh.stderr.strip() == "", refresh.stderr
    repolist = host.exec("dnf", "-q", "repolist", "--enabled").stdout.split("\n")[1:]
    ids = [line.split()[0] for line in repolist if line.strip()]
    assert len(ids) == len(set(ids)), ids
    assert {"cuda-rhel9-x86_64", "docker-ce-stable", "nvidia-container-toolkit",
            "epel"} <= set(ids), ids
    docker = configparser.ConfigParser()
    docker.read_string(host.read("/etc/yum.repos.d/docker-ce.repo"))
    assert "docker-ce-stable" not in docker.sections()  # the other channels stay, disabled
    assert [docker[name]["enabled"] for name in docker.sections()] == ["0"] * 4
    assert host.exec("test", "-e", "/etc/yum.repos.d/cuda-rhel9.repo", check=False).returncode
    toolkit = configparser.ConfigParser()
    toolkit.read_string(host.read("/etc/yum.repos.d/nvidia-container-toolkit.repo"))
    assert sorted(toolkit.sections()) == [
        "nvidia-container-toolkit", "nvidia-container-toolkit-experimental"]
    assert toolkit["nvidia-container-toolkit"]["gpgkey"] == (
        "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit")


def test_brownfield_daemon_json_keeps_the_sites_setting(platform_run: PlatformRun) -> None:
    _brownfield(platform_run)
    config = json.loads(platform_run.host.read("/etc/docker/daemon.json"))
    for key, value in {**PREEXISTING_DAEMON_JSON, **USER_DAEMON_SETTING}.items():
        assert config.get(key) == value, f"daemon.json lost or changed {key!r}: {config}"
    assert "nvidia" in config.get("runtimes", {}), config
    # dockerd runs with it (restarted for the NVIDIA runtime, the site's setting still read).
    assert platform_run.host.unit_states(["docker.service"]) == {
        "docker.service": "enabled/active"}


def test_brownfield_driver_moved_off_the_guides_branch(platform_run: PlatformRun) -> None:
    """The branch the guide installed and held (or locked) gave way to the play's."""
    brownfield = _brownfield(platform_run)
    host = platform_run.host
    assert brownfield.seeded.locked, "the guide's locks were not set up"
    if platform_run.platform.pkg_mgr == "apt":
        old = [name for name in installed_nvidia_debs(host) if f"-{OLD_BRANCH}" in name]
        assert old == [], f"packages of the guide's branch {OLD_BRANCH} are left"
        return
    streams, listing = _enabled_streams(host)
    assert streams == [["nvidia-driver", f"{NEW_BRANCH}-open", "[e]"]], listing
    # Every package the guide installed moved to the new branch (the desktop ones too):
    # nothing was erased, and no lock on the old branch is left, nvidia-settings's included.
    names = [entry.split(f"-3:{OLD_BRANCH}.")[0] for entry in brownfield.seeded.locked]
    versions = _rpm_versions(host, *names)
    assert {name: version for name, version in versions.items()
            if not version.startswith(f"{NEW_BRANCH}.")} == {}, versions
    assert "nvidia-settings" in versions and "xorg-x11-nvidia" in versions, names
    locked = host.exec("dnf", "-q", "versionlock", "list").stdout.split()
    assert f"nvidia-driver-cuda-3:{versions['nvidia-driver-cuda']}.*" in locked, locked
    stale = [entry for entry in locked if f":{OLD_BRANCH}." in entry]
    assert stale == [], f"locks on the guide's branch are left: {stale}"
    # ... and the branch stays locked as the site had it, on the new builds.
    assert f"nvidia-settings-3:{versions['nvidia-settings']}.*" in locked, locked


@dataclass
class RefusedSwitch:
    """The Rocky brownfield host asked back to 580 with a package that needs 590's build."""

    run: PlaybookRun
    before: str
    after: str


SITE_AGENT = StubRpm("site-gpu-agent", "1.0", "1", "A site's agent built against NVML 590",
                     arch="noarch", requires=(f"libnvidia-ml = 3:{RPM_DRIVER_VERSIONS[-1]}-1.el9",))
# What a refused switch must leave as it was: every rpm, every lock, the enabled stream.
RPM_STATE = ("rpm -qa | sort; dnf -q versionlock list | sort;"
             " dnf -q module list --enabled nvidia-driver")


@pytest.fixture(scope="module")
def refused_switch(platform_run: PlatformRun, tmp_path_factory: pytest.TempPathFactory,
                   ) -> Iterator[RefusedSwitch]:
    if platform_run.platform.pkg_mgr != "dnf" or platform_run.brownfield is None:
        pytest.skip("a branch switch on the Rocky host NVIDIA's guide set up")
    host = platform_run.host
    [built] = build_rpms([SITE_AGENT], tmp_path_factory.mktemp("site-rpm"))
    # Not /tmp: systemd mounts a tmpfs there, over what `docker cp` writes.
    docker("cp", str(built), f"{host.name}:/root/{built.name}")
    host.exec("dnf", "-q", "-y", "--nogpgcheck", "install", f"/root/{built.name}")
    try:
        before = host.exec("sh", "-c", RPM_STATE).stdout
        lab, key = platform_run.lab, platform_run.key
        run = run_playbook(platform_run.inventory, [*platform_run.vars_files, lab.extra_vars_file(
            f"{key}-back-to-580.yml", {"nvidia_driver_branch": OLD_BRANCH})],
            lab.path(f"{key}-back-to-580.log"), "--tags", "nvidia_driver")
        record_timing(f"{key}: switch refused (a package needs the installed branch)", run.seconds)
        yield RefusedSwitch(run, before, host.exec("sh", "-c", RPM_STATE).stdout)
    finally:
        host.exec("dnf", "-q", "-y", "remove", SITE_AGENT.name, check=False)


def test_brownfield_switch_that_would_remove_a_sites_package_is_refused_unchanged(
        refused_switch: RefusedSwitch) -> None:
    """dnf would remove site-gpu-agent (it needs libnvidia-ml at 590's build) to switch back to
    580: the play reads that from dnf's preview and stops, naming it, before it releases a
    lock or switches the stream. Before the fix the switch ran with --allowerasing and
    removed it without a word."""
    run = refused_switch.run
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("nvidia_driver : Refuse a switch that would remove packages the "
                               "play did not name"), run.explain()
    flat = " ".join(run.output.split())
    assert f"nvidia-driver:{OLD_BRANCH}-open would remove site-gpu-agent," in flat, run.explain()
    assert "dnf remove site-gpu-agent" in flat
    assert refused_switch.after == refused_switch.before


# --- Rocky 9: the RedHat path's defects that a first real run found (issue 14, item 5) ---

def _rocky(platform_run: PlatformRun) -> TargetHost:
    if platform_run.platform.pkg_mgr != "dnf":
        pytest.skip("a RedHat-family check")
    if platform_run.brownfield:
        pytest.skip("a check of the fresh Rocky host (the brownfield one has its own below)")
    return platform_run.host


def _enabled_streams(host: TargetHost) -> tuple[list[list[str]], str]:
    """The nvidia-driver module's enabled stream rows (name, stream, flags), and the listing."""
    listing = host.exec("dnf", "-q", "module", "list", "--enabled", "nvidia-driver").stdout
    return [line.split()[:3] for line in listing.splitlines()
            if line.startswith("nvidia-driver ")], listing


def _rpm_versions(host: TargetHost, *names: str) -> dict[str, str]:
    """version-release of each installed package ('' when it is not installed)."""
    found = {}
    for name in names:
        result = host.exec("rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}", name, check=False)
        found[name] = result.stdout.strip() if result.returncode == 0 else ""
    return found


def test_rocky_driver_is_the_compute_only_set_of_its_module_stream(
        platform_run: PlatformRun) -> None:
    """Stream 580-open enabled, then nvidia-driver-cuda + kmod-nvidia-open-dkms: no desktop."""
    host = _rocky(platform_run)
    enabled = host.exec("dnf", "-q", "module", "list", "--enabled", "nvidia-driver").stdout
    assert any(line.split()[:3] == ["nvidia-driver", "580-open", "[e]"]
               for line in enabled.splitlines()), enabled
    versions = _rpm_versions(host, "nvidia-driver-cuda", "kmod-nvidia-open-dkms", "nvidia-driver",
                             "nvidia-settings", "nvidia-driver-libs", "kmod-nvidia-latest-dkms")
    assert versions["nvidia-driver-cuda"] == versions["kmod-nvidia-open-dkms"] == "580.126.16-1.el9"
    desktop = [name for name in ("nvidia-driver", "nvidia-settings", "nvidia-driver-libs",
                                 "kmod-nvidia-latest-dkms") if versions[name]]
    assert not desktop, f"installed beyond the compute-only set: {desktop}"
    locked = host.exec("dnf", "-q", "versionlock", "list").stdout
    assert "nvidia-driver-cuda-3:580.126.16-1.el9.*" in locked, locked


def test_rocky_dkms_came_from_epel_with_crb_enabled(platform_run: PlatformRun) -> None:
    host = _rocky(platform_run)
    assert _rpm_versions(host, "dkms")["dkms"] == "3.2.1-1.el9"
    repolist = host.exec("dnf", "-q", "repolist", "--enabled").stdout.split()
    assert "epel" in repolist and "crb" in repolist, repolist
    epel = host.read("/etc/yum.repos.d/epel.repo")
    assert "gpgcheck = 1" in epel and "RPM-GPG-KEY-EPEL-9" in epel


def test_rocky_refuses_to_go_on_without_dkms_when_epel_is_off(platform_run: PlatformRun) -> None:
    """nvidia_driver_epel: false on a host without EPEL: one message naming it, no driver."""
    _rocky(platform_run)
    run = platform_run.epel_off
    assert run is not None
    record_timing(f"{platform_run.key}: EPEL off, refused", run.seconds)
    assert run.returncode != 0
    assert "No enabled repository" in run.output and "nvidia_driver_epel: true" in run.output
    assert platform_run.epel_off_driver == "", "the driver was installed anyway"


def test_rocky_cudnn_is_the_pinned_build_and_locked(platform_run: PlatformRun) -> None:
    """The rpm's version-release is cudnn_version (package_facts splits the two)."""
    host = _rocky(platform_run)
    assert _rpm_versions(host, "libcudnn9-cuda-12")["libcudnn9-cuda-12"] == "9.8.0.87-1"
    assert "libcudnn9-cuda-12 9.8.0.87-1" in platform_run.first.output
    assert "libcudnn9-cuda-12-0:9.8.0.87-1.*" in host.exec("dnf", "-q", "versionlock",
                                                          "list").stdout


def test_rocky_docker_ce_replaced_the_conflicting_container_tools(
        platform_run: PlatformRun) -> None:
    """podman, buildah and runc (installed before the converge) gave way to containerd.io."""
    host = _rocky(platform_run)
    versions = _rpm_versions(host, "podman", "buildah", "runc", "containerd.io", "docker-ce")
    assert versions["podman"] == versions["buildah"] == versions["runc"] == ""
    assert versions["containerd.io"] and versions["docker-ce"]


def test_rocky_container_toolkit_repo_matches_nvidias_file(platform_run: PlatformRun) -> None:
    """Signed metadata (repo_gpgcheck=1) vouches for the packages (gpgcheck=0), TLS verified."""
    host = _rocky(platform_run)
    parser = configparser.ConfigParser()
    parser.read_string(host.read("/etc/yum.repos.d/nvidia-container-toolkit.repo"))
    section = parser["nvidia-container-toolkit"]
    assert (section["repo_gpgcheck"], section["gpgcheck"], section["sslverify"]) == ("1", "0", "1")
    assert section["gpgkey"] == "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit"
    assert section["baseurl"].endswith("/libnvidia-container/stable/rpm/$basearch")


def test_rocky_kernel_devel_for_the_newest_installed_kernel(platform_run: PlatformRun) -> None:
    """The running kernel's kernel-devel is gone: stop with the fix, or build for the newest."""
    _rocky(platform_run)
    gone, newest = platform_run.headers_gone, platform_run.headers_newest
    assert gone is not None and newest is not None
    record_timing(f"{platform_run.key}: kernel-devel gone, refused", gone.seconds)
    record_timing(f"{platform_run.key}: kernel-devel of the newest kernel", newest.seconds)
    # Only the CI machine's kernel runs, and no repository has its kernel-devel.
    assert gone.returncode != 0
    assert "is in no enabled repository" in gone.output and "dnf upgrade kernel" in gone.output
    # A newer kernel (Rocky's) is installed and waits for its reboot: its kernel-devel goes in.
    assert newest.returncode == 0, newest.explain()
    assert platform_run.kernel_devel == "kernel-devel-5.14.0-503.14.1.el9_5.x86_64"
    assert "the module is built for the newest installed kernel" in newest.output


def test_rocky_run_interrupted_before_the_index_refresh_recovers(
        platform_run: PlatformRun) -> None:
    """dnf's side of issue 14 item 4 (apt's is tests/ansible/test_trust.py).

    The first driver run on the fresh host writes the CUDA .repo file, then
    cannot read the repository's metadata and stops. The next run finds the
    .repo file unchanged and must still read the index and install the driver,
    not wait out a metadata cache.
    """
    _rocky(platform_run)
    interrupted = platform_run.interrupted
    assert interrupted is not None
    record_timing(f"{platform_run.key}: driver run, CUDA index unreadable",
                  interrupted.seconds)
    assert interrupted.returncode != 0
    assert platform_run.interrupted_wrote_repo, "the run should stop after writing the .repo file"
    assert "cuda-rhel9-x86_64" in interrupted.output, interrupted.explain()
    assert platform_run.headers_newest is not None
    assert platform_run.headers_newest.returncode == 0, platform_run.headers_newest.explain()
    assert platform_run.recovered_driver.startswith("nvidia-driver-cuda-580."), \
        platform_run.recovered_driver


# --- upgrades on the converged Rocky host (issue 14, item 3) ------------------------
# Last for each stand-in: they move the converged host to the rpm repositories' second
# version of everything, which no test above expects.

# UPGRADE_VARS / UPGRADE_TAGS (tests/ansible/lab.py): the newer of each pair in
# tests/fixtures/rpmrepo, for the roles they belong to.
ROCKY_DRIVER = ["nvidia-driver-cuda", "nvidia-driver-cuda-libs", "kmod-nvidia-open-dkms",
                "nvidia-kmod-common", "nvidia-persistenced", "libnvidia-ml"]
ROCKY_CUDNN = ["libcudnn9-cuda-12", "libcudnn9-devel-cuda-12", "libcudnn9-headers-cuda-12"]
ROCKY_TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                 "libnvidia-container-tools", "libnvidia-container1"]


def _twice(platform_run: PlatformRun, name: str, extra: dict[str, object], tags: str,
           timing: str, again_tags: str = "") -> tuple[PlaybookRun, PlaybookRun]:
    """site.yml on the converged host with `extra` on top, then again (changed=0), with
    `again_tags` when given (more roles than the first run's)."""
    lab, key = platform_run.lab, platform_run.platform.key
    files = [*platform_run.vars_files, lab.extra_vars_file(f"{key}-{name}.yml", extra)]
    runs = tuple(run_playbook(platform_run.inventory, files, lab.path(f"{key}-{name}-{n}.log"),
                              "--tags", run_tags)
                 for n, run_tags in ((1, tags), (2, again_tags or tags)))
    record_timing(f"{key}: {timing}", runs[0].seconds)
    record_timing(f"{key}: re-run after it ({name})", runs[1].seconds)
    return runs[0], runs[1]


@pytest.fixture(scope="module")
def rocky_upgrade(platform_run: PlatformRun) -> PlaybookRun:
    """The converged Rocky host (old versions) gets the new ones.

    Its re-run comes after the flavour change below, with the upgrade's roles: one run checks
    that neither transition left work for the next.
    """
    _rocky(platform_run)
    lab, key = platform_run.lab, platform_run.platform.key
    files = [*platform_run.vars_files, lab.extra_vars_file(f"{key}-upgrade.yml", UPGRADE_VARS)]
    run = run_playbook(platform_run.inventory, files, lab.path(f"{key}-upgrade-1.log"),
                       "--tags", UPGRADE_TAGS)
    record_timing(f"{key}: upgrade to the second versions", run.seconds)
    return run


def test_rocky_upgrade_switches_the_stream_and_installs_the_new_versions(
        platform_run: PlatformRun, rocky_upgrade: PlaybookRun) -> None:
    """Stream 580-open -> 590-open with its compute-only set; CUDA 12.9, cuDNN, toolkit moved."""
    assert rocky_upgrade.returncode == 0, rocky_upgrade.explain()
    host = platform_run.host
    streams, listing = _enabled_streams(host)
    assert streams == [["nvidia-driver", "590-open", "[e]"]], listing
    assert _rpm_versions(host, *ROCKY_DRIVER) == dict.fromkeys(ROCKY_DRIVER, "590.48.01-1.el9")
    assert _rpm_versions(host, "cuda-toolkit-12-9")["cuda-toolkit-12-9"] != ""
    assert _rpm_versions(host, *ROCKY_CUDNN) == dict.fromkeys(ROCKY_CUDNN, "9.10.2.21-1")
    assert _rpm_versions(host, *ROCKY_TOOLKIT) == dict.fromkeys(ROCKY_TOOLKIT, "1.18.0-1")


def test_rocky_upgrade_locks_the_new_versions_only(
        platform_run: PlatformRun, rocky_upgrade: PlaybookRun) -> None:
    """The versionlock entries name the new builds; the old entries are deleted, not kept."""
    assert rocky_upgrade.returncode == 0, rocky_upgrade.explain()
    locked = platform_run.host.exec("dnf", "-q", "versionlock", "list").stdout.split()
    assert "nvidia-driver-cuda-3:590.48.01-1.el9.*" in locked, locked
    assert "kmod-nvidia-open-dkms-3:590.48.01-1.el9.*" in locked, locked
    assert "cuda-toolkit-12-9-0:" in " ".join(locked), locked
    assert "libcudnn9-cuda-12-0:9.10.2.21-1.*" in locked, locked
    assert "nvidia-container-toolkit-0:1.18.0-1.*" in locked, locked
    old = [entry for entry in locked
           if any(f":{version}" in entry for version in ("580.", "9.8.0.87-", "1.17.8-"))]
    assert old == [], "locks on the old versions were kept"


@pytest.fixture(scope="module")
def rocky_flavour_change(platform_run: PlatformRun, rocky_upgrade: PlaybookRun,
                         ) -> tuple[PlaybookRun, PlaybookRun]:
    """After the upgrade, branch 590 with the proprietary modules (stream 590-dkms), then the
    upgrade's roles again (the re-run after both).

    Before the fix the lock on kmod-nvidia-open-dkms stayed, and dnf would not erase it
    for kmod-nvidia-latest-dkms, which conflicts with it.

    The driver's module is first left as NVIDIA's guide leaves it: `dnf module install
    nvidia-driver:590-open` records the stream's default profile (and brings the desktop
    packages). switch-to then installs 590-dkms's profile, whose kmod conflicts with the
    installed one; before the role passed --allowerasing, as NVIDIA's guide does, dnf
    refused the switch.
    """
    _rocky(platform_run)
    assert rocky_upgrade.returncode == 0, rocky_upgrade.explain()
    platform_run.host.exec("dnf", "-y", "-q", "module", "install", "nvidia-driver:590-open")
    return _twice(platform_run, "flavour",
                  {**UPGRADE_VARS, "nvidia_driver_kernel_modules": "proprietary"},
                  "nvidia_driver", "open -> proprietary modules, same branch",
                  again_tags=UPGRADE_TAGS)


def test_rocky_rerun_after_the_upgrade_and_the_flavour_change_changes_nothing(
        rocky_flavour_change: tuple[PlaybookRun, PlaybookRun]) -> None:
    """The driver, CUDA, cuDNN and the toolkit: nothing left to do after either transition."""
    _, second = rocky_flavour_change
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


def test_rocky_flavour_change_switches_the_stream_and_the_locked_module(
        platform_run: PlatformRun, rocky_flavour_change: tuple[PlaybookRun, PlaybookRun]) -> None:
    first, second = rocky_flavour_change
    assert first.returncode == 0, first.explain()
    host = platform_run.host
    streams, listing = _enabled_streams(host)
    assert streams == [["nvidia-driver", "590-dkms", "[e]"]], listing
    versions = _rpm_versions(host, "kmod-nvidia-latest-dkms", "kmod-nvidia-open-dkms")
    assert versions == {"kmod-nvidia-latest-dkms": "590.48.01-1.el9", "kmod-nvidia-open-dkms": ""}
    locked = host.exec("dnf", "-q", "versionlock", "list").stdout.split()
    assert "kmod-nvidia-latest-dkms-3:590.48.01-1.el9.*" in locked, locked
    assert [entry for entry in locked if entry.startswith("kmod-nvidia-open-dkms-")] == []
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


# --- the branch upgrade on the converged Ubuntu 22.04 host ---------------------------
# Ubuntu names the driver packages by branch up to 580, not from 590: a switch between the
# schemes is new package names, and the old branch's must go. (Debian 12's test, in
# test_site.py, covers the apt family's path where one name moves from one held version to
# the next.) One build is asked for (nvidia_driver_version): its own pinning package.

@pytest.fixture(scope="module")
def ubuntu_upgrade(platform_run: PlatformRun) -> tuple[PlaybookRun, PlaybookRun]:
    if platform_run.key != "ubuntu2204":
        pytest.skip("the Ubuntu branch upgrade runs on 22.04 (the 24.04 brownfield host's first"
                    " converge moves the guide's 580 to 590)")
    return _twice(platform_run, "upgrade",
                  {"nvidia_driver_branch": "590", "nvidia_driver_version": "590.48.01"},
                  "nvidia_driver", "driver branch 580 -> 590 (branch-named -> unversioned)")


def test_ubuntu_upgrade_replaces_the_branch_named_packages_with_the_unversioned_ones(
        platform_run: PlatformRun, ubuntu_upgrade: tuple[PlaybookRun, PlaybookRun]) -> None:
    first, second = ubuntu_upgrade
    assert first.returncode == 0, first.explain()
    installed = _dpkg_nvidia(platform_run.host)
    # The build asked for: its version pinning package, not the branch's.
    _assert_ubuntu_branch(installed, "590", pinning="nvidia-driver-pinning-590.48.01")
    pin = platform_run.host.read("/etc/apt/preferences.d/nvidia-driver-pin")
    assert "Pin: version 590.48.01-*" in pin, pin
    assert second.returncode == 0, second.explain()
    assert second.recap["changed"] == 0, second.explain()


# --- a reboot the play did not do ------------------------------------------------------
# Last for each stand-in: it reboots the converged host.

def test_persistence_mode_survives_a_reboot_the_play_did_not_do(platform_run: PlatformRun) -> None:
    """Two GPUs, then a reboot: the daemon is back and nvidia-smi says Enabled on each GPU.

    Ubuntu's nvidia-compute-utils unit is static and passes --no-persistence-mode
    (tests/fixtures/persistenced_units.py): without the role's drop-in (ExecStart, [Install])
    nothing started the daemon, or it started with persistence mode off, and what
    `nvidia-smi -pm 1` had set was gone with /run. EL9's unit needs neither and must
    come back all the same.
    """
    host = platform_run.host
    host.exec("mkdir", "-p", "/var/lib/nvidia-stub")
    host.exec("tee", "/var/lib/nvidia-stub/gpus", stdin="NVIDIA H100 80GB HBM3, 9.0, 81559\n" * 2)
    started = time.monotonic()
    try:
        host.reboot()
        record_timing(f"{platform_run.key}: reboot", time.monotonic() - started)
        active = host.exec("systemctl", "is-active", "nvidia-persistenced",
                           check=False).stdout.strip()
        modes = host.exec("nvidia-smi", "--query-gpu=index,persistence_mode",
                          "--format=csv,noheader", check=False).stdout
        command = host.exec("systemctl", "show", "--property=ExecStart",
                            "nvidia-persistenced").stdout
    finally:
        host.exec("rm", "-f", "/var/lib/nvidia-stub/gpus")
    assert modes.splitlines() == ["0, Enabled", "1, Enabled"], f"after the reboot: {modes!r}"
    assert active == "active", command
    flags = [word for word in command.split()
             if word in ("--persistence-mode", "--no-persistence-mode")]
    assert flags[-1:] != ["--no-persistence-mode"], command  # the last one wins
