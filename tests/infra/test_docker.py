"""Docker with the NVIDIA runtime: daemon.json merged, users in the group."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.helpers import daemon_json, held_packages, installed_version


def test_docker_is_enabled_and_running(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["docker_service_enabled"]:
        pytest.skip("docker_service_enabled is false")
    docker = host.service("docker")
    assert docker.is_enabled and docker.is_running


def test_daemon_json_registers_the_nvidia_runtime(host: Any, tfvars: dict[str, Any]) -> None:
    name = tfvars["nvidia_container_toolkit_runtime_name"]
    runtime = daemon_json(host)["runtimes"][name]
    assert runtime["path"] == tfvars["nvidia_container_toolkit_runtime_path"]


def test_daemon_json_kept_the_site_options(host: Any, tfvars: dict[str, Any]) -> None:
    config = daemon_json(host)
    for key, value in tfvars["docker_daemon_options"].items():
        assert config.get(key) == value, f"daemon.json lost or changed {key!r}"


def test_default_runtime_matches_the_setting(host: Any, tfvars: dict[str, Any]) -> None:
    default = daemon_json(host).get("default-runtime", "runc")
    name = tfvars["nvidia_container_toolkit_runtime_name"]
    assert (default == name) == bool(tfvars["nvidia_container_toolkit_default_runtime"])


def test_running_docker_knows_the_nvidia_runtime(host: Any, tfvars: dict[str, Any]) -> None:
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    assert tfvars["nvidia_container_toolkit_runtime_name"] in runtimes


def test_users_are_in_the_docker_group(host: Any, tfvars: dict[str, Any]) -> None:
    for user in tfvars["docker_users"]:
        assert "docker" in host.user(user).groups, f"{user} is not in the docker group"


def test_container_toolkit_is_the_pinned_version(host: Any, tfvars: dict[str, Any]) -> None:
    version = tfvars["nvidia_container_toolkit_version"]
    assert f"version {version.split('-')[0]}" in host.check_output("nvidia-ctk --version")
    for name in tfvars["nvidia_container_toolkit_packages"]:
        assert installed_version(host, name).startswith(version.split("-")[0]), name


@pytest.mark.usefixtures("debian_family")
def test_container_toolkit_is_held(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["nvidia_container_toolkit_hold"]:
        pytest.skip("nvidia_container_toolkit_hold is false")
    assert set(tfvars["nvidia_container_toolkit_packages"]) <= held_packages(host)


@pytest.mark.gpu
def test_a_container_sees_the_gpus(host: Any, tfvars: dict[str, Any], gpu_count: int) -> None:
    image = tfvars["gpu_validate_image"]
    if host.run(f"docker image inspect {image}").rc != 0:
        pytest.skip(f"{image} is not on the host (build it: see images/ngc/Dockerfile)")
    out = host.check_output(f"docker run --rm --gpus all --entrypoint nvidia-smi {image} -L")
    assert len([line for line in out.splitlines() if line.startswith("GPU ")]) == gpu_count
