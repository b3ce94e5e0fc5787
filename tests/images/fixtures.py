"""Fixtures shared by tests/images and tests/host: the images and the engine's limits."""

from __future__ import annotations

import pytest

from tests.images.image_builds import build_cpu_image, build_pip_image, engine_memlock_limit


@pytest.fixture(scope="session")
def cpu_image(debian_python_image: str) -> str:
    """The project's cpu image, built from the Debian base (cached by the engine)."""
    return build_cpu_image(debian_python_image)


@pytest.fixture(scope="session")
def pip_image(debian_python_image: str) -> str:
    """The pip image (tensorflow[and-cuda] and NVIDIA's wheels), built on the Debian base."""
    return build_pip_image(debian_python_image)


@pytest.fixture(scope="session")
def memlock(docker_host: str) -> int:
    """The locked-memory limit runs may ask for on this engine (see image_builds.py)."""
    return engine_memlock_limit()
