"""The linters are part of the suite, so `scripts/test.sh` is the one command that gates CI."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(args: list[str], cwd: Path = REPO) -> None:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"


def test_ruff() -> None:
    run([str(BIN / "ruff"), "check", "."])


def test_mypy() -> None:
    run([str(BIN / "mypy")])


def test_shellcheck() -> None:
    if shutil.which("shellcheck") is None:
        pytest.fail("shellcheck missing: scripts/install-test-deps.sh installs it")
    tracked = subprocess.run(
        ["git", "ls-files", "*.sh", ".ci/run"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked, "no shell scripts found: the glob is wrong"
    run(["shellcheck", *tracked])
