"""Every `pip install` in scripts/ and images/ is hash-checked, offline, or documented.

A corpus walk over every file the repository ships there (shell, Dockerfiles,
Python, SLURM templates): each pip install must check hashes (--require-hashes),
fetch nothing (--no-index; or --no-deps with --no-build-isolation on local source),
or be one of the installs docs/security.md's "Locked, with hashes" section names with the
reason it cannot be locked. A new unhashed install anywhere fails here until it is
locked or documented. Offline and well under a second.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
LOCKS_DOC = REPO / "docs" / "security.md"

# pip's install command, however it is spelled: pip, pip3, python3 -m pip, "pip", "install".
PIP_INSTALL = re.compile(
    r"""(?:\bpip3?(?:\.\d+)?|-m\s+pip)\s+install\b|["']pip["']\s*,\s*["']install["']""")

# The installs that cannot be hash-locked, each as (file, what identifies the command):
# docs/security.md's "Locked, with hashes" section gives the reason for each file named here.
DOCUMENTED = {
    # The dev tools (tests and linters) go in after the locked runtime set: not hash-locked,
    # because torch resolves to a local CPU build whose hash is not PyPI's. The build
    # requirements come from the lock (--no-build-isolation), so only the dev extra is free.
    ("scripts/bootstrap.sh", '--no-build-isolation -e ".[$extras]"'),
}


@dataclass(frozen=True)
class Install:
    path: str  # relative to the repository
    line: int
    command: str  # the logical line from `pip install` on, continuation lines joined

    @property
    def hashed(self) -> bool:
        return "--require-hashes" in self.command.split()

    @property
    def offline(self) -> bool:
        words = self.command.split()
        return "--no-index" in words or ("--no-deps" in words
                                         and "--no-build-isolation" in words)

    @property
    def documented(self) -> bool:
        return any(self.path == path and marker in self.command for path, marker in DOCUMENTED)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with backslash continuations joined and comments dropped."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.lstrip().startswith("#") and not pending:
            continue
        if not pending:
            start = number
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append((start, pending + raw))
        pending = ""
    if pending:
        lines.append((start, pending))
    return lines


def installs_in(path: str, text: str) -> list[Install]:
    """Each pip install command in one file, cut at the shell's next command separator."""
    found = []
    for number, line in _logical_lines(text):
        for match in PIP_INSTALL.finditer(line):
            command = re.split(r"\s(?:&&|\|\||;|\|)\s|\)\s*$", line[match.start():])[0]
            found.append(Install(path, number, " ".join(command.split())))
    return found


def _shipped_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "scripts", "images"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.split()
    return sorted(path for path in listed if (REPO / path).is_file())


def _corpus() -> list[Install]:
    installs = []
    for path in _shipped_files():
        try:
            text = (REPO / path).read_text()
        except UnicodeDecodeError:
            continue
        if path.endswith(".md"):
            continue  # prose: commands there are examples, not what runs
        installs += installs_in(path, text)
    return installs


def test_the_walk_finds_the_installs_it_must_see() -> None:
    """Not vacuous: the known installers are in the corpus."""
    paths = {install.path for install in _corpus()}
    assert {"scripts/bootstrap.sh", "images/lib/install-deps",
            "images/lib/install-workloads"} <= paths, paths


def test_every_pip_install_is_hashed_offline_or_documented() -> None:
    loose = [f"{i.path}:{i.line}: {i.command}" for i in _corpus()
             if not (i.hashed or i.offline or i.documented)]
    assert loose == [], ("unhashed pip installs (lock them with --require-hashes, or name them "
                         "in DOCUMENTED and docs/security.md's 'Locked, with hashes' with the "
                         "reason):\n" + "\n".join(loose))


def test_every_documented_install_exists_and_the_lock_doc_gives_its_reason() -> None:
    section = LOCKS_DOC.read_text().split("## Locked, with hashes", 1)[1].split("\n## ", 1)[0]
    corpus = _corpus()
    for path, marker in DOCUMENTED:
        assert any(i.path == path and marker in i.command for i in corpus), (path, marker)
        assert f"`{path}`" in section, f"docs/security.md's lock section does not name {path}"


def test_pip_upgrades_itself_only_from_the_lock() -> None:
    """bootstrap.sh's first install is pip itself: from requirements/pip.txt, hash-checked."""
    (first, *_) = [i for i in _corpus() if i.path == "scripts/bootstrap.sh"]
    assert first.hashed and "requirements/pip.txt" in first.command, first


# --- The detector itself, over spellings and layouts a script could use ----------------

_spellings = st.sampled_from([
    "pip install", "pip3 install", "pip3.12 install", "python3 -m pip install",
    ".venv/bin/python -m  pip   install", "python -m pip install",
])
_options = st.lists(st.sampled_from(["-q", "--upgrade", "--user", "-e .", "--no-cache-dir",
                                     "--pre", "-r requirements.txt"]), max_size=4)


@given(_spellings, _options, st.booleans(), st.sampled_from(["", "RUN ", "  ", "x && "]))
def test_the_detector_finds_every_spelling_and_judges_it(spelling: str, options: list[str],
                                                         continued: bool, prefix: str) -> None:
    words = [*options, "somepackage"]
    body = (" \\\n    ".join([spelling, *words]) if continued
            else " ".join([spelling, *words]))
    text = f"#!/bin/sh\n# pip install commented-out\n{prefix}{body} && echo done\n"
    (found,) = installs_in("scripts/x.sh", text)
    assert found.command.endswith("somepackage")
    assert not (found.hashed or found.offline or found.documented)
    hashed = installs_in("scripts/x.sh", text.replace(spelling, spelling + " --require-hashes"))
    assert [i.hashed for i in hashed] == [True]


@pytest.mark.parametrize("text", [
    'subprocess.run([sys.executable, "-m", "pip", "install", "x"])',
    "subprocess.run(['pip', 'install', 'x'])",
])
def test_the_detector_finds_python_argument_lists(text: str) -> None:
    assert len(installs_in("scripts/x.py", text)) == 1
