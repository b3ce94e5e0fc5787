"""Fixtures for the workloads package tests: real-format archives and CLI runs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workloads.cifar_fixture import write_archive

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Archive:
    path: Path
    sha256: str


@pytest.fixture(scope="session")
def cifar_archive(tmp_path_factory: pytest.TempPathFactory) -> Archive:
    path = tmp_path_factory.mktemp("cifar") / "cifar-10-python.tar.gz"
    return Archive(path, write_archive(path))


@pytest.fixture(scope="session")
def peak_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One matmul-peak cache for the session: each CLI run would otherwise re-measure it."""
    return tmp_path_factory.mktemp("peak") / "peak-flops.json"


@pytest.fixture
def isolated_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peak_cache: Path
) -> Iterator[dict[str, str]]:
    """Environment for CLI runs: an empty cache and a download URL that cannot leave the host."""
    env = dict(os.environ)
    env["WORKLOADS_CACHE"] = str(tmp_path / "cache")
    env["WORKLOADS_PEAK_CACHE"] = str(peak_cache)
    env["WORKLOADS_CIFAR10_URL"] = "http://127.0.0.1:9/cifar-10-python.tar.gz"  # discard port
    env["WORKLOADS_RESULTS"] = str(tmp_path / "results")
    env.pop("KERAS_BACKEND", None)
    env["CUDA_VISIBLE_DEVICES"] = ""
    monkeypatch.setenv("WORKLOADS_CACHE", env["WORKLOADS_CACHE"])
    monkeypatch.setenv("WORKLOADS_CIFAR10_URL", env["WORKLOADS_CIFAR10_URL"])
    yield env


@pytest.fixture
def netbind_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty $WORKLOADS_CACHE for the worker bind library, and never the user's own
    ~/.cache/workloads: the library's candidates are kept under tmp_path in its own view.
    (Not HOME in os.environ: it is the whole process's, and every child the background
    jobs start meanwhile would get it.)"""
    from workloads.netbind import library

    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    candidates = library.cache_candidates
    monkeypatch.setattr(library, "cache_candidates",
                        lambda: [c for c in candidates() if c.is_relative_to(tmp_path)])
    return tmp_path / "cache"


FRAMEWORKS = ("tensorflow", "keras", "jax", "torch")


def without_frameworks(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` with every ML framework shadowed by a package that fails on import.

    For checks that must happen before a framework loads: a run that imports one
    ends in a traceback naming it instead of its own one-line error.
    """
    for name in FRAMEWORKS:
        package = folder / "poisoned" / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise RuntimeError('{name} was imported before the input was checked')\n"
        )
    paths = [str(folder / "poisoned"), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


NO_LOWERED_COST = (
    "import jax.stages\n"
    "jax.stages.Lowered.cost_analysis = lambda self: None  # as on JAX's GPU backends\n"
)


def jax_only(env: dict[str, str], folder: Path) -> dict[str, str]:
    """``env`` for a host like the first real GPU machine: JAX, and no TensorFlow there.

    Two things of that machine are reproduced: a package named ``tensorflow`` on
    ``PYTHONPATH`` raises ``ModuleNotFoundError`` on import, as a missing package does;
    and XLA's cost analysis of a *lowered* program answers ``None``, as JAX's GPU
    backends do (the compiled program's analysis is left as it is), by a
    ``sitecustomize`` that replaces ``jax.stages.Lowered.cost_analysis``.
    """
    shadow = folder / "jax-only"
    (shadow / "tensorflow").mkdir(parents=True, exist_ok=True)
    (shadow / "tensorflow" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tensorflow'\", name='tensorflow')\n"
    )
    (shadow / "sitecustomize.py").write_text(NO_LOWERED_COST)
    paths = [str(shadow), *filter(None, [env.get("PYTHONPATH")])]
    return {**env, "PYTHONPATH": os.pathsep.join(paths), "KERAS_BACKEND": "jax"}


def run_cli(
    args: list[str], env: dict[str, str], timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workloads", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def assert_one_line_error(
    result: subprocess.CompletedProcess[str], command: str, *fragments: str
) -> str:
    """A failed run: non-zero exit, no traceback, exactly one error line holding ``fragments``."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    lines = [
        ln
        for ln in result.stderr.splitlines()
        if ln.startswith(f"workloads {command}: error:") or ln.startswith("workloads: error:")
    ]
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]
