"""The `box` fixture (tests/vm/conftest.py) and `require_box`, which background jobs call too."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.vm.machine import Box, build_box

# Debian packages the VM tests drive (scripts/install-test-deps.sh installs them).
TOOLS = {
    "debootstrap": "debootstrap", "qemu-img": "qemu-utils",
    "qemu-system-x86_64": "qemu-system-x86", "mke2fs": "e2fsprogs", "sfdisk": "fdisk",
    "ssh": "openssh-client", "ssh-keygen": "openssh-client",
}


def require_box() -> Box:
    """The Debian 12 box from scripts/build-box.sh (cached by recipe hash across runs).

    Skips without root (debootstrap, chroot) and fails naming the packages to
    install when a tool is missing; background jobs call it as the fixture does.
    """
    if os.geteuid() != 0:
        pytest.skip("building the box needs root (debootstrap, chroot)")
    missing = sorted({package for tool, package in TOOLS.items() if shutil.which(tool) is None})
    if missing:
        pytest.fail(f"missing tools for the VM tests; apt-get install -y {' '.join(missing)}")
    return build_box()


@pytest.fixture(scope="session")
def box() -> Box:
    """The box, for tests that boot it in their own fixtures."""
    return require_box()
