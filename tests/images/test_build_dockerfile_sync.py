"""Each build gets the Dockerfile it names, even when another of the same size came first.

BuildKit keeps the Dockerfile last sent for a context and sends it again only when
its size or modification time changed; in a fresh clone every file has the same time.
The suite once built images/ngc/Dockerfile and then, asked for images/pip/Dockerfile
(3743 bytes both), tagged the ngc build as the pip image. Two Dockerfiles of one size
and one time in one context, built one after the other, must each give their own image.
A few seconds: two label-only builds on the Debian base.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from tests.images import image_builds
from tests.support.docker_engine import engine_client

pytestmark = [pytest.mark.docker]


def _dockerfile(path: Path, label: str) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(f"ARG BASE_IMAGE\nFROM ${{BASE_IMAGE}}\nLABEL tfhost.test.which={label}\n")


def test_two_dockerfiles_of_one_size_and_time_each_build_their_own(
        debian_python_image: str, tmp_path: Path) -> None:
    import docker

    context = tmp_path / "context"
    first, second = context / "one" / "Dockerfile", context / "two" / "Dockerfile"
    _dockerfile(first, "one")
    _dockerfile(second, "two")
    assert first.stat().st_size == second.stat().st_size
    stamp = first.stat().st_mtime_ns
    for path in (first, second):
        os.utime(path, ns=(stamp, stamp))
    client = engine_client()
    tags = {name: f"tfhost/dockerfile-sync-{name}:{os.getpid()}" for name in ("one", "two")}
    try:
        for name, tag in tags.items():
            image_builds.build(f"{name}/Dockerfile", tag, {"BASE_IMAGE": debian_python_image},
                               context=context)
        labels = {name: client.images.get(tag).labels.get("tfhost.test.which")
                  for name, tag in tags.items()}
        assert labels == {"one": "one", "two": "two"}
    finally:
        for tag in tags.values():
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(tag, force=True)
