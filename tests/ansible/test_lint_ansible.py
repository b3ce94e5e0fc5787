"""ansible-lint (production profile) and yamllint over ansible/, as CI runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ansible.playbook import ANSIBLE_DIR

BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
           "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"), "NO_COLOR": "1"}
    return subprocess.run([str(BIN / tool), *args], cwd=ANSIBLE_DIR, env=env, capture_output=True,
                          text=True, timeout=600, check=False)


def test_yamllint_is_clean() -> None:
    result = _run("yamllint", "--strict", ".")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_ansible_lint_production_profile_is_clean() -> None:
    result = _run("ansible-lint", "--offline")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    assert "Profile 'production' was required, and it passed" in output, output[-2000:]


def test_site_yml_syntax() -> None:
    result = _run("ansible-playbook", "--syntax-check", "-i", "inventory", "site.yml")
    assert result.returncode == 0, result.stdout + result.stderr
