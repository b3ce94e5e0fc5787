"""Pytest fixtures for tests that need a real Docker engine.

The engine is the project's private one (scripts/docker-engine.sh): its own
socket, no bridge, no iptables. A session that started it stops it; a session
that found it running (a developer's shell) leaves it running.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "scripts" / "docker-engine.sh"
BASE_IMAGE = REPO / "scripts" / "build-base-image.sh"


# How long a test waits for one reply of the engine. A hang guard, not a speed limit:
# docker-py's default (60 s) is shorter than the engine's slowest honest replies, which
# scale with an image's size and a busy disk. dockerd 20.10 writes a whole `docker save`
# export to a temporary folder before it sends the first byte: the 2.5 GB ngc image took
# 20 s to 1:48 on the project's 2-core machine, and over 60 s in a CI run with the other
# core busy. `images.remove` too answers only after the layers are deleted.
SLOW_REPLY_TIMEOUT_S = 1800


def engine_client(docker_host: str | None = None) -> Any:
    """A ``docker.DockerClient`` for ``docker_host`` (else ``DOCKER_HOST``) that waits out the
    engine's slow replies.

    Why a test gives its own engine as an argument, never in ``DOCKER_HOST``: the
    environment is the whole process's, and the background jobs' containers and plays
    (tests/support/background.py) would reach that engine for as long as the test runs.
    """
    import docker

    if docker_host is not None:
        return docker.DockerClient(base_url=docker_host, timeout=SLOW_REPLY_TIMEOUT_S)
    return docker.from_env(timeout=SLOW_REPLY_TIMEOUT_S)


def _docker_host() -> str:
    line = subprocess.run([ENGINE, "env"], check=True, capture_output=True, text=True).stdout
    return line.strip().split("=", 1)[1]


_ENGINE_LOCK = threading.Lock()
_ORIGINAL_DOCKER_HOST = os.environ.get("DOCKER_HOST")
_started_here = False  # this process started the engine: the session fixture stops it


def pytest_configure(config: pytest.Config) -> None:
    """The whole session's DOCKER_HOST is the private engine's, set once, here.

    The `docker` commands, plays and containers of the tests and of the background jobs
    (tests/support/background.py) read it from os.environ. It is set before collection,
    so before any job's thread or any test starts, and left alone until the session is
    over (pytest_unconfigure): no child ever sees it change. The engine itself starts
    when a test or job first needs it (ensure_engine).
    """
    os.environ["DOCKER_HOST"] = _docker_host()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _ORIGINAL_DOCKER_HOST is None:
        os.environ.pop("DOCKER_HOST", None)
    else:
        os.environ["DOCKER_HOST"] = _ORIGINAL_DOCKER_HOST


def ensure_engine() -> str:
    """DOCKER_HOST of the running private engine (the session's, see pytest_configure),
    started if needed.

    Why not only the fixture: a background job (tests/support/background.py)
    needs the engine before any fixture runs. The lock keeps the job's thread
    and the fixture from starting two daemons on one socket.
    """
    global _started_here
    if os.geteuid() != 0:
        pytest.skip("the Docker engine tests need root (dockerd, debootstrap)")
    with _ENGINE_LOCK:
        host = _docker_host()
        running = subprocess.run(["docker", "-H", host, "version"], capture_output=True,
                                 check=False).returncode == 0
        if not running:
            result = subprocess.run([ENGINE, "start"], capture_output=True, text=True,
                                    check=False)
            if result.returncode != 0:
                raise RuntimeError(f"could not start dockerd: {result.stderr.strip()}")
            _started_here = True
        return host


@pytest.fixture(scope="session")
def docker_host() -> Iterator[str]:
    """DOCKER_HOST of a running private engine (started here if needed)."""
    try:
        host = ensure_engine()
    except RuntimeError as error:
        pytest.fail(str(error))
    try:
        yield host
    finally:
        if _started_here:
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
