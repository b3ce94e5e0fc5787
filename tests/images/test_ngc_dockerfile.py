"""The ngc Dockerfile, built for real on a stand-in for NGC's TensorFlow image.

NGC is out of reach here, so the stand-in (tests/images/image_builds.py) is
Debian 12 with the CUDA build of TensorFlow in the system Python, NGC's
/workspace and Ubuntu's `ubuntu` user at uid 1000, tagged with NGC's own name
(in this engine only) and passed through the Dockerfile's real BASE_IMAGE
argument. What is checked is the Dockerfile's own promise: the workloads'
dependencies go in around the base's packages without replacing any of them
(Keras excepted), the image runs as `workloads` (uid 1000), `check` and a tiny
`cifar10` work in it as another uid, and the build's CA never lands in a layer.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.images.image_builds import (
    CA_MARKER,
    NGC_STANDIN_BASE,
    build_ngc_on_standin,
    run_once,
)
from tests.images.image_checks import (
    check_reports_cuda_build_and_no_gpu,
    results_dir,
    tiny_cifar10_writes_its_record,
)
from tests.images.layer_scan import layers_holding
from tests.support.docker_engine import engine_client

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]

FREE_TO_CHANGE = {"pip", "setuptools", "wheel", "keras"}


@pytest.fixture(scope="module")
def ngc(debian_python_image: str) -> tuple[str, str]:
    return build_ngc_on_standin(debian_python_image)


def _installed(image: str) -> dict[str, str]:
    text = run_once(image, ["-m", "pip", "list", "--format=freeze"], entrypoint="python3",
                user="0:0")
    pairs = (line.split("==", 1) for line in text.split() if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def _locked_versions() -> dict[str, set[str]]:
    """name -> the versions requirements/ngc.txt pins for it (one per environment marker)."""
    text = (REPO / "requirements" / "ngc.txt").read_text()
    locked: dict[str, set[str]] = {}
    for name, version in re.findall(r"(?m)^([A-Za-z0-9_.-]+)==([^\s;]+)", text):
        locked.setdefault(name.lower().replace("_", "-"), set()).add(version)
    return locked


def test_ngc_dockerfile_keeps_the_base_packages(ngc: tuple[str, str]) -> None:
    standin, image = ngc
    assert standin == NGC_STANDIN_BASE == "nvcr.io/nvidia/tensorflow:25.02-tf2-py3"
    before, after = _installed(standin), _installed(image)
    changed = {name: (before[name], after.get(name)) for name in before
               if name not in FREE_TO_CHANGE and after.get(name) != before[name]}
    assert changed == {}
    assert after["tensorflow"] == "2.21.0"
    assert {"workloads", "psweep", "pandas", "matplotlib"} <= set(after)
    # Everything the image added or replaced is at the version requirements/ngc.txt pins
    # (installed hash-checked): nothing was resolved from the index on the way.
    locked = _locked_versions()
    added = {name: version for name, version in after.items()
             if name != "workloads" and before.get(name) != version}
    assert added, "the build installed nothing"
    unlocked = {name: version for name, version in added.items()
                if version not in locked.get(name, set())}
    assert unlocked == {}, f"installed outside requirements/ngc.txt: {unlocked}"
    assert run_once(image, ["--version"]).strip() == "workloads 0.1.0"
    config = engine_client().images.get(image).attrs["Config"]
    assert config["User"] == "1000:1000" and config["Entrypoint"] == ["workloads"]
    assert config["Labels"]["org.opencontainers.image.title"] == "tfhost workloads (ngc)"
    assert config["Labels"]["org.opencontainers.image.base.name"] == NGC_STANDIN_BASE
    owner = run_once(image, ["-c", "import pwd; print(pwd.getpwuid(1000).pw_name)"],
                     entrypoint="python3")
    assert owner.strip() == "workloads"  # NGC's `ubuntu` (uid 1000) made room for it


def test_check_and_cifar10_in_the_ngc_image(ngc: tuple[str, str], memlock: int,
                                            tmp_path: Path) -> None:
    _, image = ngc
    results = results_dir(tmp_path)
    report = check_reports_cuda_build_and_no_gpu(image, results, memlock)
    assert report["tensorflow"] == "2.21.0"
    tiny_cifar10_writes_its_record(image, results, memlock)


def test_build_ca_never_lands_in_a_layer(ngc: tuple[str, str]) -> None:
    """The single-stage ngc image used the CA in three RUN steps; no layer may hold it."""
    _, image = ngc
    readme_line = b"TensorFlow GPU-host benchmarks"  # in the image: the scan does find text
    assert layers_holding(image, [readme_line, CA_MARKER]) == {readme_line}
