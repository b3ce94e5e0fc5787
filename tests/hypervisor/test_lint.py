"""The hypervisor playbook and role pass the project's Ansible linters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
BIN = Path(sys.executable).parent
TARGETS = ["hypervisor.yml", "roles/gpu_passthrough"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
           "PATH": f"{BIN}:{os.environ.get('PATH', '')}"}
    return subprocess.run(list(args), cwd=ANSIBLE_DIR, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_ansible_lint_production_profile() -> None:
    result = _run(str(BIN / "ansible-lint"), "--profile", "production", "--strict", *TARGETS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_yamllint() -> None:
    result = _run(str(BIN / "yamllint"), "--strict", "-c", ".yamllint", *TARGETS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_syntax_check() -> None:
    result = _run(str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,",
                  "hypervisor.yml")
    assert result.returncode == 0, result.stdout + result.stderr
