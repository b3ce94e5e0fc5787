"""The three independent scenarios the Ansible tests need, each on its own host.

They share nothing but the stub repositories and the registry, so they can
run one after the other (the default) or side by side (conftest.PARALLEL):

* converge: a fresh container, site.yml twice (the second must change nothing),
  with a watch on the process list for the NGC key;
* fresh: another fresh container, site.yml --check (must pass and change
  nothing), then the two wrong-key runs (which must fail at the repository);
* legacy: a Debian 11 container, which site.yml must refuse at once.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.ansible.playbook import (
    EXAMPLE_NGC_API_KEY,
    PlaybookRun,
    run_playbook,
    write_inventory,
)
from tests.ansible.target import TEST_USER, TargetHost, docker, start_target
from tests.ansible.watch import CommandLineWatch
from tests.fixtures.aptrepo import StubRepos
from tests.support.docker_engine import BASE_IMAGE

# Variables that differ between this CI container and a GPU host, each for
# one reason the container cannot change.
CONTAINER_VARS: dict[str, Any] = {
    # A container cannot reboot; the reboot handler is exercised on VMs.
    "nvidia_driver_reboot": False,
    # The container runs the CI machine's kernel, which Debian has no headers
    # for; the distribution's meta package is what DKMS would build against.
    "nvidia_driver_kernel_headers_packages": ["linux-headers-amd64"],
    # Docker's own repository is unreachable from CI; Debian's docker.io is real.
    "docker_source": "distro",
    # Site options that must survive the NVIDIA runtime merge. The container
    # shares the host's network namespace: its dockerd must not add a bridge
    # or iptables rules there.
    "docker_daemon_options": {
        "bridge": "none",
        "iptables": False,
        "log-driver": "json-file",
        "log-opts": {"max-size": "10m", "max-file": "3"},
    },
    "docker_users": [TEST_USER],
    "ngc_users": ["root", TEST_USER],
    # No registry is reachable: never let the play try to pull the image, nor
    # build it (its NGC base would have to be pulled); tests/hardware builds one.
    "gpu_validate_pull": "never",
    "gpu_validate_build": "never",
}


@dataclass
class Lab:
    """Everything the scenarios share: repos, registry, images, a work directory."""

    workdir: Path
    repos: StubRepos
    base_url: str
    registry_address: str
    target_image: str
    vars_file: Path = field(init=False)

    def __post_init__(self) -> None:
        variables = {
            **self.repos.ansible_vars(self.base_url),
            **CONTAINER_VARS,
            "ngc_registry": self.registry_address,
        }
        self.vars_file = self.workdir / "ci-vars.yml"
        self.vars_file.write_text(yaml.safe_dump(variables, sort_keys=True))

    def path(self, name: str) -> Path:
        return self.workdir / name

    def extra_vars_file(self, name: str, variables: dict[str, Any]) -> Path:
        path = self.path(name)
        path.write_text(yaml.safe_dump(variables))
        return path


@dataclass
class ConvergeResult:
    host: TargetHost
    inventory: Path
    first: PlaybookRun
    second: PlaybookRun
    watch_samples: int
    leaked_command_lines: list[str]
    unpipelined_command_lines: list[str]


@dataclass
class FreshResult:
    host: TargetHost
    check: PlaybookRun
    pristine_after_check: dict[str, bool]
    wrong_key: PlaybookRun
    wrong_signer: PlaybookRun
    sources_after_wrong_key: str


@dataclass
class LegacyResult:
    container: str
    distribution: str
    run: PlaybookRun


def converge(lab: Lab, name: str) -> ConvergeResult:
    """Fresh host -> site.yml -> site.yml again."""
    host = start_target(lab.target_image, name)
    inventory = write_inventory(lab.path(f"{name}.inventory.yml"), host.name)
    with CommandLineWatch(EXAMPLE_NGC_API_KEY, scope=host.container_id()) as watch:
        first = run_playbook(inventory, [lab.vars_file], lab.path("converge-1.log"))
    second = run_playbook(inventory, [lab.vars_file], lab.path("converge-2.log"))
    return ConvergeResult(host, inventory, first, second, watch.samples, watch.leaks,
                          watch.unpipelined)


# Files a real (not --check) run would create first; none may exist after --check.
CHECK_MODE_WITNESSES = [
    "/etc/apt/sources.list.d/nvidia-cuda.list",
    "/etc/apt/keyrings/nvidia-cuda.asc",
    "/etc/modprobe.d/blacklist-nouveau.conf",
    "/usr/bin/nvidia-smi",
    "/usr/bin/dockerd",
    "/root/.docker/config.json",
]


def fresh_host_runs(lab: Lab, name: str) -> FreshResult:
    """Fresh host -> --check; then the two ways a wrong key must stop the play."""
    host = start_target(lab.target_image, name)
    inventory = write_inventory(lab.path(f"{name}.inventory.yml"), host.name)
    check = run_playbook(inventory, [lab.vars_file], lab.path("check.log"), "--check")
    pristine = {
        path: host.exec("test", "-e", path, check=False).returncode != 0
        for path in CHECK_MODE_WITNESSES
    }
    impostor_url = lab.repos.impostor_key_url(lab.base_url)
    # 1. The key served is not the pinned one: refused before apt ever sees it.
    wrong_key = run_playbook(
        inventory,
        [lab.vars_file, lab.extra_vars_file("wrong-key.yml",
                                            {"nvidia_driver_cuda_repo_key_url": impostor_url})],
        lab.path("wrong-key.log"), "--tags", "nvidia_driver",
    )
    sources = host.exec("ls", "/etc/apt/sources.list.d/").stdout
    # 2. Someone pins the impostor's fingerprint too: apt itself then rejects
    #    the repository, whose metadata the impostor did not sign.
    wrong_signer = run_playbook(
        inventory,
        [lab.vars_file, lab.extra_vars_file("wrong-signer.yml", {
            "nvidia_driver_cuda_repo_key_url": impostor_url,
            "nvidia_driver_cuda_repo_key_fingerprint": lab.repos.impostor_fingerprint,
        })],
        lab.path("wrong-signer.log"), "--tags", "nvidia_driver",
    )
    return FreshResult(host, check, pristine, wrong_key, wrong_signer, sources)


def legacy_image() -> str:
    """Debian 11 with Python and sudo (built from Debian's mirror, cached like every base image).

    The play must reach its OS check, after fact gathering through sudo.
    """
    built = subprocess.run(
        [str(BASE_IMAGE), "tfhost/debian11-python", "--suite", "bullseye",
         "--include", "python3,sudo"],
        capture_output=True, text=True, check=False,
    )
    if built.returncode != 0:
        raise RuntimeError(f"building the Debian 11 image failed: {built.stderr[-2000:]}")
    return built.stdout.strip().splitlines()[-1]


def legacy_os(lab: Lab, name: str, image_build: Future[str]) -> LegacyResult:
    """A real Debian 11 (supported by nothing in this play) must be refused at once."""
    image = image_build.result()
    docker("rm", "--force", name, check=False)
    docker("run", "--detach", "--name", name, "--network", "none", image, "sleep", "infinity")
    try:
        distribution = docker("exec", name, "cat", "/etc/debian_version").stdout.strip()
        inventory = write_inventory(lab.path(f"{name}.inventory.yml"), name)
        run = run_playbook(inventory, [lab.vars_file], lab.path("legacy.log"))
    finally:
        docker("rm", "--force", name, check=False)
    return LegacyResult(name, distribution, run)


# Upgrades on a converged host (issue 14, item 3): the stub repositories (apt and rpm) hold
# two versions of each; a host is converged with the older and then moved to these newer
# ones. Only the roles the versions belong to run: the rest of the play is covered by the
# ordinary re-run.
UPGRADE_VARS: dict[str, object] = {
    "nvidia_driver_branch": "590",
    "cuda_toolkit_version": "12.9",
    "cudnn_version": "9.10.2.21-1",
    "nvidia_container_toolkit_version": "1.18.0-1",
}
UPGRADE_TAGS = "nvidia_driver,cuda_toolkit,cudnn,nvidia_container_toolkit"
