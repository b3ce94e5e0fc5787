"""Run site.yml on N stand-in hosts of one OS: a converge, then idle re-runs, each profiled.

The stand-ins, repositories and registry are the suite's (tests/ansible/lab.py, target.py,
rocky.py): the benchmark measures the play the tests converge, on the same containers.
Each run goes through tests/ansible/callback_plugins/tfhost_profile.py (per task and host:
seconds and module executions) and is waited for with os.wait4, whose rusage is the
controller's cost: ansible-playbook, its forks and the `docker exec` clients they start.
scripts/bench-ansible.py is the command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.ansible.bench_profile import RunCost, parse_records, task_costs
from tests.ansible.fake_registry import fake_registry
from tests.ansible.lab import Lab
from tests.ansible.platforms import DEBIAN12, ROCKY9, UBUNTU2204, UBUNTU2404, Platform
from tests.ansible.playbook import (
    ANSIBLE_DIR,
    BIN,
    EXAMPLE_NGC_API_KEY,
    VAULT,
    VAULT_PASSWORD,
)
from tests.ansible.target import TargetHost, start_target

CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"
PLATFORMS: dict[str, Platform] = {p.key: p for p in (DEBIAN12, UBUNTU2204, UBUNTU2404, ROCKY9)}


@dataclass
class BenchLab:
    """The suite's lab, plus what the RedHat path needs on top."""

    lab: Lab
    rocky_vars_file: Path | None


@contextmanager
def open_bench_lab(workdir: Path, rocky: bool) -> Iterator[BenchLab]:
    """Stub repositories served on loopback, the fake NGC registry, the target image."""
    from tests.ansible.rocky import rocky_vars
    from tests.ansible.target import target_image
    from tests.fixtures.aptrepo import build_stub_repos
    from tests.fixtures.rpmrepo import build_rpm_repos
    from tests.support.loopback_http import serve_directory

    repos = build_stub_repos(workdir / "repos")
    image = target_image()
    with ExitStack() as stack:
        base_url = stack.enter_context(serve_directory(repos.root, workdir / "repo-http.log"))
        registry = stack.enter_context(fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY))
        lab = Lab(workdir, repos, base_url, registry.address, image)
        rocky_file = None
        if rocky:
            rpm_repos = build_rpm_repos(workdir / "rpmrepos")
            rpm_url = stack.enter_context(serve_directory(rpm_repos.root,
                                                          workdir / "rpmrepo-http.log"))
            rocky_file = lab.extra_vars_file("rocky-vars.yml", rocky_vars(rpm_repos, rpm_url))
            lab.rpm = (rpm_repos, rpm_url)  # type: ignore[attr-defined]
        yield BenchLab(lab, rocky_file)


def start_hosts(bench: BenchLab, platform: Platform, count: int, prefix: str,
                parallel: int = 2) -> list[TargetHost]:
    """`count` fresh stand-ins of `platform`, booted two at a time (the machine's cores)."""
    from tests.ansible.rocky import prepare_rocky, rocky_image

    rpm_based = platform.pkg_mgr == "dnf"
    image = rocky_image() if rpm_based else bench.lab.target_image

    def start(index: int) -> TargetHost:
        host = start_target(image, f"{prefix}-{index}", platform)
        if rpm_based:
            try:
                rpm_repos, rpm_url = bench.lab.rpm  # type: ignore[attr-defined]
                prepare_rocky(host, rpm_repos, rpm_url)
            except Exception:
                host.remove()
                raise
        return host

    with ThreadPoolExecutor(max_workers=parallel) as pool:
        futures = [pool.submit(start, index) for index in range(count)]
        hosts = []
        errors = []
        for future in futures:
            try:
                hosts.append(future.result())
            except Exception as error:  # every started host is removed, then the first error
                errors.append(error)
        if errors:
            for host in hosts:
                host.remove()
            raise errors[0]
    return hosts


def write_fleet_inventory(path: Path, hosts: list[TargetHost]) -> Path:
    """gpu_hosts with every stand-in, reached as tests/ansible/playbook.py reaches one."""
    variables = {"ansible_connection": "community.docker.docker",
                 "ansible_python_interpreter": "/usr/bin/python3",
                 "ansible_become_method": "sudo"}
    inventory = {"all": {"children": {"gpu_hosts": {
        "hosts": {host.name: dict(variables) for host in hosts}}}}}
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def snapshot_trees(trees: dict[str, Path], workdir: Path) -> dict[str, Path]:
    """A copy of each checkout's ansible/ (label -> copy): edits made while it runs do not count."""
    copies = {}
    for index, (label, checkout) in enumerate(trees.items()):
        copy = workdir / "trees" / str(index) / "ansible"
        shutil.copytree(checkout / "ansible", copy, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.retry"))
        copies[label] = copy
    return copies


def profiled_run(label: str, inventory: Path, vars_files: list[Path], workdir: Path,
                 hosts: int, forks: int | None = None,
                 ansible_dir: Path = ANSIBLE_DIR) -> RunCost:
    """ansible-playbook site.yml as an operator types it, with the profile callback on."""
    stem = workdir / f"{label.replace(' ', '-')}-{time.monotonic_ns()}"
    profile = stem.with_suffix(".jsonl")
    args = [str(BIN / "ansible-playbook"), "-i", str(inventory), "site.yml",
            "--vault-password-file", str(VAULT_PASSWORD), "-e", f"@{VAULT}"]
    for path in vars_files:
        args += ["-e", f"@{path}"]
    if forks is not None:
        args += ["--forks", str(forks)]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ansible_dir / "ansible.cfg"),
           "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACKS),
           "ANSIBLE_CALLBACKS_ENABLED": "tfhost_profile", "TFHOST_PROFILE_PATH": str(profile),
           "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    with stem.with_suffix(".out").open("w") as output:
        started = time.monotonic()
        process = subprocess.Popen(args, cwd=ansible_dir, env=env, stdin=subprocess.DEVNULL,
                                   stdout=output,
                                   stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.monotonic() - started
        process.returncode = os.waitstatus_to_exitcode(status)
    records = parse_records(profile.read_text().splitlines()) if profile.exists() else []
    return RunCost(label=label, hosts=hosts, wall_seconds=round(wall, 2),
                   controller_cpu_seconds=round(usage.ru_utime + usage.ru_stime, 2),
                   controller_peak_rss_mib=round(usage.ru_maxrss / 1024, 1),
                   returncode=process.returncode, tasks=task_costs(records))


def bench_platform(bench: BenchLab, platform: Platform, count: int, reruns: int,
                   workdir: Path, keep: bool = False, forks: int | None = None,
                   trees: dict[str, Path] | None = None) -> list[RunCost]:
    """Fresh hosts -> converge -> `reruns` idle re-runs; the hosts are removed at the end.

    With several `trees` (label -> a snapshot's ansible/), the first converges and every
    re-run round runs each tree in turn on the same hosts: paired figures under the same
    load, and proof that each tree's re-run changes nothing on what the other converged.
    """
    trees = trees or {"": ANSIBLE_DIR}
    first = next(iter(trees.values()))
    prefix = f"tfhost-bench-{platform.key}-{os.getpid()}-n{count}"
    hosts = start_hosts(bench, platform, count, prefix)
    try:
        inventory = write_fleet_inventory(workdir / f"{prefix}.inventory.yml", hosts)
        vars_files = [bench.lab.vars_file]
        if platform.pkg_mgr == "dnf" and bench.rocky_vars_file is not None:
            vars_files.append(bench.rocky_vars_file)
        runs = [profiled_run(_label("converge", next(iter(trees))), inventory, vars_files,
                             workdir, count, forks, first)]
        for number in range(1, reruns + 1):
            for tree, ansible_dir in trees.items():
                label = _label("re-run" if reruns == 1 else f"re-run {number}", tree)
                runs.append(profiled_run(label, inventory, vars_files, workdir, count, forks,
                                         ansible_dir))
        return runs
    finally:
        if not keep:
            for host in hosts:
                host.remove()


def _label(run: str, tree: str) -> str:
    return f"{run} ({tree})" if tree else run
