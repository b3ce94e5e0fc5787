"""CUDA toolkit and cuDNN: the chosen versions, pinned, on the paths."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.helpers import held_packages, installed_version


def _toolkit_package(tfvars: dict[str, Any]) -> str:
    return "cuda-toolkit-" + str(tfvars["cuda_toolkit_version"]).replace(".", "-")


def test_toolkit_release_is_installed(host: Any, tfvars: dict[str, Any]) -> None:
    assert host.package(_toolkit_package(tfvars)).is_installed


@pytest.mark.usefixtures("debian_family")
def test_toolkit_is_held(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["cuda_toolkit_hold"]:
        pytest.skip("cuda_toolkit_hold is false")
    assert _toolkit_package(tfvars) in held_packages(host)


def test_nvcc_is_the_chosen_release(host: Any, tfvars: dict[str, Any]) -> None:
    version = str(tfvars["cuda_toolkit_version"])
    out = host.check_output(f"/usr/local/cuda-{version}/bin/nvcc --version")
    assert f"release {version}," in out


def test_login_shells_find_nvcc(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["cuda_toolkit_configure_path"]:
        pytest.skip("cuda_toolkit_configure_path is false")
    version = str(tfvars["cuda_toolkit_version"])
    path = host.check_output("bash -lc 'command -v nvcc'")
    assert path == f"/usr/local/cuda-{version}/bin/nvcc"


def test_loader_searches_the_toolkit(host: Any, tfvars: dict[str, Any]) -> None:
    if not tfvars["cuda_toolkit_configure_ldconfig"]:
        pytest.skip("cuda_toolkit_configure_ldconfig is false")
    version = str(tfvars["cuda_toolkit_version"])
    conf = host.file("/etc/ld.so.conf.d/cuda-toolkit.conf").content_string
    assert f"/usr/local/cuda-{version}/lib64" in conf.splitlines()


@pytest.mark.usefixtures("debian_family")
def test_cudnn_is_the_pinned_version_and_held(host: Any, tfvars: dict[str, Any]) -> None:
    major = str(tfvars.get("cudnn_cuda_major") or str(tfvars["cuda_toolkit_version"]).split(".")[0])
    name = f"libcudnn9-cuda-{major}"
    assert installed_version(host, name) == tfvars["cudnn_version"]
    if tfvars["cudnn_hold"]:
        assert name in held_packages(host)
