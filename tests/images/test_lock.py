"""The hash locks in requirements/ match pyproject.toml and each other.

The images and CI install from these files with ``pip install --require-hashes``:
cpu.txt and gpu.txt (the runtime set), ngc.txt (the same without TensorFlow, what
the ngc image adds around NGC's base) and pip.txt (pip itself, for bootstrap.sh).
An edit to pyproject.toml that a lock does not satisfy would otherwise surface as a
broken image build (or, worse, as an image without the new dependency). Offline and
in well under a second: the locks are parsed, not re-resolved (scripts/lock-deps.sh
does that, with uv). images/lib/lock-subset, which picks what the ngc image installs
from its lock, is tested here too.
"""

from __future__ import annotations

import functools
import importlib.machinery
import subprocess
import sys
import tomllib
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
LOCKS = {"cpu": REPO / "requirements" / "cpu.txt", "gpu": REPO / "requirements" / "gpu.txt"}
NGC_LOCK = REPO / "requirements" / "ngc.txt"
PIP_LOCK = REPO / "requirements" / "pip.txt"
LOCK_SUBSET = REPO / "images" / "lib" / "lock-subset"
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


def _project_requirements(extra: str | None) -> list[Requirement]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"][extra] if extra else []
    return [Requirement(text) for text in (
        *pyproject["build-system"]["requires"], *pyproject["project"]["dependencies"],
        *extras)]


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


@pytest.mark.parametrize("lock", [*LOCKS.values(), NGC_LOCK, PIP_LOCK], ids=lambda p: p.name)
def test_every_pin_carries_a_hash(lock: Path) -> None:
    pins = _pins(lock)
    assert len(pins) > (0 if lock == PIP_LOCK else 20)
    unhashed = [name for name, _, _, hashes in pins if not hashes]
    assert unhashed == []
    for name, _, _, hashes in pins:
        assert all(h.startswith("sha256:") and len(h) == 71 for h in hashes), name


def test_the_ngc_lock_satisfies_pyproject_without_tensorflow() -> None:
    """What the ngc image may add: every requirement but TensorFlow (NGC's), at the cpu
    lock's versions wherever both pin a package, so the images agree."""
    cpu = {python: _pinned_for(LOCKS["cpu"], python) for python in PYTHONS}
    for python in PYTHONS:
        pinned = _pinned_for(NGC_LOCK, python)
        for requirement in _project_requirements(None):
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"ngc lock lacks {requirement}; run scripts/lock-deps.sh"
            assert requirement.specifier.contains(pinned[name], prereleases=True), (
                f"ngc lock pins {name}=={pinned[name]}, pyproject wants {requirement}")
        assert not {name for name in pinned if name.startswith(("tensorflow", "nvidia-c"))}
        differing = {name: (version, cpu[python][name]) for name, version in pinned.items()
                     if name in cpu[python] and cpu[python][name] != version}
        assert differing == {}, f"ngc and cpu locks disagree: {differing}"


def test_the_pip_lock_pins_pip_alone() -> None:
    assert [name for name, _, _, _ in _pins(PIP_LOCK)] == ["pip"]


LOCK_TEXT = """\
# header
keras==3.15.1 \\
    --hash=sha256:aaaa \\
    --hash=sha256:bbbb
numpy==2.4.6 ; python_full_version < '3.12' \\
    --hash=sha256:cccc
numpy==2.5.5 ; python_full_version >= '3.12' \\
    --hash=sha256:dddd
typing-extensions==4.16.0 \\
    --hash=sha256:eeee
psweep==0.16.0 \\
    --hash=sha256:ffff
setuptools==84.2.1 \\
    --hash=sha256:1111
"""


def _subset(tmp_path: Path, installed: list[str], *replace: str) -> list[str]:
    (tmp_path / "lock.txt").write_text(LOCK_TEXT)
    (tmp_path / "installed.txt").write_text("".join(f"{line}\n" for line in installed))
    out = subprocess.run([sys.executable, str(LOCK_SUBSET), str(tmp_path / "lock.txt"),
                          str(tmp_path / "installed.txt"), *replace],
                         capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def test_lock_subset_keeps_the_base_and_replaces_only_what_it_is_told(tmp_path: Path) -> None:
    """NGC has NumPy, Keras and setuptools: NumPy stays NGC's (both marker variants left
    out), Keras and setuptools come from the lock, whole, with their hashes."""
    picked = _subset(tmp_path, ["numpy==1.26.4", "keras==3.6.0", "setuptools==68.0.0",
                                "tensorflow==2.17.0+nv25.2"], "keras", "setuptools")
    assert picked == [
        "keras==3.15.1 --hash=sha256:aaaa --hash=sha256:bbbb",
        "typing-extensions==4.16.0 --hash=sha256:eeee",
        "psweep==0.16.0 --hash=sha256:ffff",
        "setuptools==84.2.1 --hash=sha256:1111",
    ]


@functools.cache
def _subset_function() -> Callable[[str, str, list[str]], list[str]]:
    loader = importlib.machinery.SourceFileLoader("lock_subset", str(LOCK_SUBSET))
    module = types.ModuleType(loader.name)
    loader.exec_module(module)
    found: Callable[[str, str, list[str]], list[str]] = module.subset
    return found


def subset(lock_text: str, installed_text: str, replace: list[str]) -> list[str]:
    return _subset_function()(lock_text, installed_text, replace)


@given(st.sampled_from(["typing-extensions", "psweep", "numpy", "keras"]),
       st.sampled_from(["-", "_", ".", "--", "_-"]),
       st.lists(st.booleans(), min_size=17, max_size=17), st.booleans())
def test_lock_subset_matches_names_however_the_base_spells_them(
        name: str, separator: str, upper: list[bool], replaced: bool) -> None:
    """pip freeze may print Typing_Extensions or typing.extensions: one package (PEP 503),
    left to the base, unless it is named to be replaced (however that is spelled)."""
    spelled = "".join(c.upper() if index < len(upper) and upper[index] else c
                      for index, c in enumerate(name.replace("-", separator)))
    picked = subset(LOCK_TEXT, f"{spelled}==1.0\n", [spelled.swapcase()] if replaced else [])
    ours = [line for line in picked if line.startswith(f"{name}==")]
    assert bool(ours) == replaced, (spelled, picked)
    assert len(picked) == (6 if replaced else 4 if name == "numpy" else 5)
