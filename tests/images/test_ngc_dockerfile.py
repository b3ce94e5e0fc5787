"""The ngc Dockerfile, built for real on a stand-in for NGC's TensorFlow image.

NGC is out of reach here, so the base is Debian 12 with TensorFlow installed
into the system Python, as NGC ships it. What is checked is the Dockerfile's
own promise: the workloads' dependencies go in around the base's packages
without replacing any of them (Keras excepted), the image runs as uid 1000,
and `check` works in it.
"""

from __future__ import annotations

import pytest

from tests.images.image_builds import build_ngc_on_standin, run_once

pytestmark = [pytest.mark.docker, pytest.mark.slow]

FREE_TO_CHANGE = {"pip", "setuptools", "wheel", "keras"}


def _installed(image: str) -> dict[str, str]:
    text = run_once(image, ["-m", "pip", "list", "--format=freeze"], entrypoint="python3",
                user="0:0")
    pairs = (line.split("==", 1) for line in text.split() if "==" in line)
    return {name.lower().replace("_", "-"): version for name, version in pairs}


def test_ngc_dockerfile_keeps_the_base_packages(debian_python_image: str) -> None:
    standin, image = build_ngc_on_standin(debian_python_image)
    before, after = _installed(standin), _installed(image)
    changed = {name: (before[name], after.get(name)) for name in before
               if name not in FREE_TO_CHANGE and after.get(name) != before[name]}
    assert changed == {}
    assert after["tensorflow-cpu"] == "2.21.0"
    assert {"workloads", "psweep", "pandas", "matplotlib"} <= set(after)
    assert run_once(image, ["--version"]).strip() == "workloads 0.1.0"
    import docker

    config = docker.from_env().images.get(image).attrs["Config"]
    assert config["User"] == "1000:1000" and config["Entrypoint"] == ["workloads"]
    assert config["Labels"]["org.opencontainers.image.title"] == "tfhost workloads (ngc)"
    assert '"ok": true' in run_once(image, ["check", "--json"], user="1234:1234")
