"""gpu_validate finds, pulls or builds its image: an unqualified name is built, never pulled.

The role's image tasks (tasks/image.yml) run for real on this machine
(connection local) against the private Docker engine: the build context is
copied from the repository exactly as on a GPU host, and built from a
Dockerfile that differs from images/ngc/Dockerfile only in its (local) base,
since NGC is unreachable here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.ansible.playbook import REPO, PlaybookRun
from tests.ansible.target import docker, target_image
from tests.hardware.localplay import run_role_tasks

pytestmark = [pytest.mark.docker]

def _run(tmp_path: Path, name: str, variables: dict[str, object]) -> PlaybookRun:
    return run_role_tasks(tmp_path, name, "gpu_validate", "image", variables)


def test_an_unqualified_image_is_built_on_the_host_not_pulled(docker_host: str,
                                                              tmp_path: Path) -> None:
    image = f"tfhost/hw-validate:{os.getpid()}"
    base = target_image()
    run = _run(tmp_path, "build", {
        "gpu_validate_image": image,
        "gpu_validate_pull": "missing",
        "gpu_validate_build_source": str(REPO),
        "gpu_validate_build_dockerfile": "tests/hardware/fixtures/validate.Dockerfile",
        "gpu_validate_build_args": {"BASE_IMAGE": base},
        "gpu_validate_build_dir": str(tmp_path / "context"),
        "gpu_validate_build_timeout": 600,
    })
    try:
        assert run.returncode == 0, run.explain()
        assert "TASK [gpu_validate : Pull the validation image]" in run.output
        assert "skipping: [localhost]" in run.output.split("Pull the validation image]")[1][:400]
        listed = docker("run", "--rm", image).stdout.strip()
        assert listed == "/opt/src/workloads/cli.py"
        assert (tmp_path / "context" / "workloads" / "cli.py").is_file()
    finally:
        docker("image", "rm", "--force", image, check=False)


def test_a_registry_image_that_cannot_be_had_fails_with_the_fix(docker_host: str,
                                                                tmp_path: Path) -> None:
    image = "127.0.0.1:1/tfhost/absent:1"  # a registry nobody listens on (loopback)
    run = _run(tmp_path, "absent", {"gpu_validate_image": image, "gpu_validate_pull": "missing",
                                    "gpu_validate_build": "never"})
    assert run.returncode != 0
    assert run.failed_task == "gpu_validate : Fail if the image is not available"
    said = " ".join(run.output.split())
    assert f"The validation image {image} is not on localhost: the pull failed" in said
    assert "Fix: set gpu_validate_build: missing" in said
