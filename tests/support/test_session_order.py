"""The measuring tests run after the `run_last` modules (which wait for the background set-ups).

A `measures` test compares figures measured on this machine; a converge or a guest
running beside it halves a healthy stand-in's speed and fails the comparison.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_measuring_tests_come_after_the_run_last_modules() -> None:
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider",
         "tests/fleet/test_accept_play.py", "tests/ansible/test_site.py"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300,
    ).stdout
    modules = [line.split("::")[0] for line in collected.splitlines() if "::" in line]
    assert modules, collected
    site = [i for i, module in enumerate(modules) if module.endswith("test_site.py")]
    play = [i for i, module in enumerate(modules) if module.endswith("test_accept_play.py")]
    assert site and play
    assert max(site) < min(play), "a measuring test runs before a run_last module"
