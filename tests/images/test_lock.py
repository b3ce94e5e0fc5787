"""The hash-locked runtime sets (requirements/cpu.txt, gpu.txt) match pyproject.toml.

The images and CI install the runtime set from these files with
``pip install --require-hashes``; an edit to pyproject.toml that the lock does
not satisfy would otherwise surface as a broken image build (or, worse, as an
image without the new dependency). Offline and in well under a second: the
lock is parsed, not re-resolved (scripts/lock-deps.sh does that, with uv).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = {"cpu": REPO / "requirements" / "cpu.txt", "gpu": REPO / "requirements" / "gpu.txt"}
# The interpreters the images and CI run: Debian 12's 3.11 and the python:3.12 base.
PYTHONS = ("3.11", "3.12")


def _environment(python: str) -> dict[str, str]:
    return {"python_version": python, "python_full_version": f"{python}.0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "os_name": "posix", "implementation_name": "cpython",
            "platform_python_implementation": "CPython", "extra": ""}


def _pins(lock: Path) -> list[tuple[str, Version, Marker | None, list[str]]]:
    """(name, version, marker, hashes) of every entry, continuation lines joined."""
    entries: list[tuple[str, Version, Marker | None, list[str]]] = []
    for entry in lock.read_text().replace("\\\n", " ").splitlines():
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        parts = entry.split()
        hashes = [p.removeprefix("--hash=") for p in parts if p.startswith("--hash=")]
        spec = " ".join(p for p in parts if not p.startswith("--hash="))
        requirement = Requirement(spec)
        (specifier,) = requirement.specifier  # exactly one ==
        assert specifier.operator == "==", entry
        entries.append((str(canonicalize_name(requirement.name)), Version(specifier.version),
                        requirement.marker, hashes))
    return entries


def _pinned_for(lock: Path, python: str) -> dict[str, Version]:
    env = _environment(python)
    return {name: version for name, version, marker, _ in _pins(lock)
            if marker is None or marker.evaluate(env)}


def _project_requirements(extra: str) -> list[Requirement]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [Requirement(text) for text in (
        *pyproject["build-system"]["requires"], *pyproject["project"]["dependencies"],
        *pyproject["project"]["optional-dependencies"][extra])]


@pytest.mark.parametrize("extra", sorted(LOCKS))
def test_lock_satisfies_pyproject(extra: str) -> None:
    """Every requirement of pyproject.toml (with the extra) is pinned, at a version it allows,
    for each interpreter; a requirement's own extras (tensorflow[and-cuda]) are checked too."""
    for python in PYTHONS:
        pinned = _pinned_for(LOCKS[extra], python)
        for requirement in _project_requirements(extra):
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"{extra} lock lacks {requirement}; run scripts/lock-deps.sh"
            assert requirement.specifier.contains(pinned[name], prereleases=True), (
                f"{extra} lock pins {name}=={pinned[name]}, pyproject wants {requirement}; "
                "run scripts/lock-deps.sh")
    if extra == "gpu":  # tensorflow[and-cuda] brings NVIDIA's CUDA and cuDNN wheels
        pinned = _pinned_for(LOCKS[extra], "3.11")
        assert {"nvidia-cudnn-cu12", "nvidia-cublas-cu12", "nvidia-cuda-runtime-cu12"} <= set(
            pinned)


@pytest.mark.parametrize("extra", sorted(LOCKS))
def test_every_pin_carries_a_hash(extra: str) -> None:
    pins = _pins(LOCKS[extra])
    assert len(pins) > 20
    unhashed = [name for name, _, _, hashes in pins if not hashes]
    assert unhashed == []
    for name, _, _, hashes in pins:
        assert all(h.startswith("sha256:") and len(h) == 71 for h in hashes), name


def test_project_deps_prints_an_extra_and_refuses_an_unknown_one() -> None:
    tool = [sys.executable, str(REPO / "images/lib/project-deps"), str(REPO / "pyproject.toml")]
    out = subprocess.run([*tool, "--extra", "gpu"], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[-1].startswith("tensorflow[and-cuda]")
    bad = subprocess.run([*tool, "--extra", "tpu"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr == ("project-deps: no extra 'tpu' in "
                          f"{REPO / 'pyproject.toml'}; choose one of cpu, dev, gpu\n")
