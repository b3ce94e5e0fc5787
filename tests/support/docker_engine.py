"""Pytest fixtures for tests that need a real Docker engine.

The engine is the project's private one (scripts/docker-engine.sh): its own
socket, no bridge, no iptables. A session that started it stops it; a session
that found it running (a developer's shell) leaves it running.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "scripts" / "docker-engine.sh"
BASE_IMAGE = REPO / "scripts" / "build-base-image.sh"


def _docker_host() -> str:
    line = subprocess.run([ENGINE, "env"], check=True, capture_output=True, text=True).stdout
    return line.strip().split("=", 1)[1]


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """DOCKER_HOST of a running private engine (started here if needed)."""
    if os.geteuid() != 0:
        pytest.skip("the Docker engine tests need root (dockerd, debootstrap)")
    host = _docker_host()
    was_running = (
        subprocess.run(
            ["docker", "-H", host, "version"], capture_output=True, check=False
        ).returncode
        == 0
    )
    if not was_running:
        result = subprocess.run([ENGINE, "start"], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.fail(f"could not start dockerd: {result.stderr.strip()}")
    old = os.environ.get("DOCKER_HOST")
    os.environ["DOCKER_HOST"] = host
    try:
        yield host
    finally:
        if old is None:
            os.environ.pop("DOCKER_HOST", None)
        else:
            os.environ["DOCKER_HOST"] = old
        if not was_running:
            subprocess.run([ENGINE, "stop"], check=False, capture_output=True)


def build_base_image(tag: str, include: str = "") -> str:
    """Build (or reuse) a debootstrap base image; returns the content-addressed tag."""
    args = [str(BASE_IMAGE), tag]
    if include:
        args += ["--include", include]
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"base image {tag} failed: {result.stderr.strip()[-2000:]}")
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def debian_python_image(docker_host: str) -> str:
    """Debian 12 with python3, venv, pip and CA certificates: base of the cpu image."""
    return build_base_image(
        "tfhost/debian-python", "python3,python3-venv,python3-pip,ca-certificates"
    )
