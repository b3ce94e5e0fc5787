"""NVIDIA's repositories are configured, and trusted only through their own key."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytestmark = pytest.mark.usefixtures("debian_family")

SOURCES = {
    "CUDA": ("/etc/apt/sources.list.d/nvidia-cuda.list", "/etc/apt/keyrings/nvidia-cuda.asc"),
    "libnvidia-container": (
        "/etc/apt/sources.list.d/nvidia-container-toolkit.list",
        "/etc/apt/keyrings/nvidia-container-toolkit.asc",
    ),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_repository_is_signed_by_its_own_keyring(host: Any, name: str) -> None:
    source, keyring = SOURCES[name]
    entries = [
        line for line in host.file(source).content_string.splitlines()
        if line.startswith("deb ")
    ]
    assert len(entries) == 1, f"{source} should hold exactly one deb line: {entries}"
    signed_by = re.search(r"signed-by=(\S+?)[\] ]", entries[0])
    assert signed_by, f"{source} has no signed-by option: {entries[0]}"
    assert signed_by.group(1) == keyring
    key = host.file(keyring)
    assert key.exists and key.user == "root" and key.mode == 0o644
    assert "BEGIN PGP PUBLIC KEY BLOCK" in key.content_string


def test_no_nvidia_key_in_the_global_trust_store(host: Any) -> None:
    """A key in trusted.gpg.d would vouch for every repository, defeating signed-by."""
    listing = host.run("ls /etc/apt/trusted.gpg.d/").stdout
    assert "nvidia" not in listing.lower() and "cuda" not in listing.lower()


def test_apt_reads_the_cuda_repository(host: Any) -> None:
    policy = host.check_output("apt-cache policy")
    assert "l=NVIDIA CUDA" in policy, "apt has no index from the CUDA repository"


def test_driver_branch_is_pinned(host: Any, tfvars: dict[str, Any]) -> None:
    pref = host.file("/etc/apt/preferences.d/nvidia-cuda.pref").content_string
    assert f"Pin: version {tfvars['nvidia_driver_branch']}.*" in pref
