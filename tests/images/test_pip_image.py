"""The pip image, built for real: tensorflow[and-cuda] with NVIDIA's CUDA and cuDNN wheels.

Built on CI's Debian 12 base (the Dockerfile's BASE_IMAGE argument) from the
hash-locked requirements/gpu.txt; pip's downloads come from the BuildKit cache
mount the cpu and ngc builds share, so the wheels (about 3 GB) are fetched once.
No GPU here: ``check`` must report the CUDA/cuDNN versions TensorFlow was built
for and no GPU, ``--require-gpu`` must fail with exit 2, and a tiny ``cifar10``
runs on the CPU as a non-root user with its record on the /results volume. A
rebuild after touching a workload file must redo only the source layer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.images import image_builds
from tests.images.image_checks import (
    check_reports_cuda_build_and_no_gpu,
    results_dir,
    tiny_cifar10_writes_its_record,
)
from tests.support.docker_engine import engine_client

# Built on every CI run: on a fresh machine the cold build (tensorflow[and-cuda] and
# NVIDIA's wheels, 3.3 GB of downloads) took 114 s (docs/development.md, "Image builds";
# the suite's whole time is there too). TFHOST_PIP_IMAGE=0 skips it, for a developer on a slow link.
pytestmark = [
    pytest.mark.docker,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("TFHOST_PIP_IMAGE") == "0",
                       reason="TFHOST_PIP_IMAGE=0: the pip image build was switched off"),
]


def test_pip_image_metadata(pip_image: str) -> None:
    config = engine_client().images.get(pip_image).attrs["Config"]
    assert config["Entrypoint"] == ["workloads"] and config["User"] == "1000:1000"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert env["NVIDIA_REQUIRE_CUDA"] == "cuda>=12.0"
    assert config["Labels"]["org.opencontainers.image.title"] == "tfhost workloads (pip)"


def test_pip_image_has_the_locked_nvidia_wheels(pip_image: str, memlock: int,
                                                tmp_path: Path) -> None:
    script = ("import importlib.metadata as m; print(' '.join(f'{n}=={m.version(n)}' for n in "
              "('tensorflow', 'nvidia-cudnn-cu12', 'nvidia-cublas-cu12')))")
    out = image_builds.run_once(pip_image, ["-c", script], entrypoint="python3",
                                user="1234:1234")
    lock = (image_builds.REPO / "requirements" / "gpu.txt").read_text()
    for pin in out.split():
        assert re.search(rf"^{re.escape(pin)} ", lock, re.MULTILINE), pin


def test_check_and_cifar10_in_the_pip_image(pip_image: str, memlock: int,
                                            tmp_path: Path) -> None:
    results = results_dir(tmp_path)
    report = check_reports_cuda_build_and_no_gpu(pip_image, results, memlock)
    assert report["tensorflow"] == "2.21.0"
    record = tiny_cifar10_writes_its_record(pip_image, results, memlock)
    assert record["env"]["cuda_build"] == report["cuda_build"]


def test_touching_a_workload_rebuilds_only_the_source_layer(pip_image: str,
                                                            debian_python_image: str,
                                                            tmp_path: Path) -> None:
    ran = image_builds.rebuild_after_touching_a_workload(
        image_builds.PIP_DOCKERFILE, image_builds.PIP_TAG, debian_python_image, tmp_path)
    image_builds.assert_only_the_source_layers_ran(ran)
