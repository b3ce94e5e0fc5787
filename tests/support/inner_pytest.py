"""An inner pytest session in a child process, in a folder of its own.

What pytester's ``runpytest_subprocess`` does, without pytester's fixture: that fixture
chdirs into its folder and sets HOME (and PY_COLORS, PYTEST_DEBUG_TEMPROOT) in
os.environ for the whole process while its test runs, so every child the background
jobs (tests/support/background.py) start meanwhile would start there, with that HOME.
Here the folder, HOME and the rest are the child's alone (cwd=, env=).
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 600


class InnerPytest:
    """Files written in `path`; `runpytest_subprocess` runs ``python -m pytest`` there."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._runs = itertools.count()

    def makepyfile(self, **modules: str) -> None:
        """``name=source``: path/name.py, its source dedented (as pytester writes it)."""
        for name, source in modules.items():
            (self.path / f"{name}.py").write_text(textwrap.dedent(source).strip() + "\n")

    def makeini(self, source: str) -> None:
        """path/tox.ini: its [pytest] section makes path the inner session's rootdir."""
        (self.path / "tox.ini").write_text(textwrap.dedent(source).strip() + "\n")

    def env(self) -> dict[str, str]:
        """This process's environment, with what the inner session must have its own of:
        HOME (no user configuration), the modules of path and of this repository, its
        timings kept apart from the suite's results/, no outer pytest options."""
        env = {name: value for name, value in os.environ.items()
               if name not in ("PYTEST_ADDOPTS", "TOX_ENV_DIR")}
        env.update({"HOME": str(self.path), "PY_COLORS": "0",
                    "PYTHONPATH": os.pathsep.join([str(self.path), str(REPO)]),
                    "TFHOST_RESULTS": str(self.path / "results")})
        return env

    def runpytest_subprocess(self, *args: str) -> pytest.RunResult:
        basetemp = self.path / f"runpytest-{next(self._runs)}"
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", f"--basetemp={basetemp}", *args],
                              cwd=self.path, env=self.env(), stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        result = pytest.RunResult(done.returncode, done.stdout.splitlines(),
                                  done.stderr.splitlines(), time.monotonic() - started)
        print(done.stdout, done.stderr, sep="\n")  # shown when the test fails, as pytester's
        return result
