"""`workloads report` reads a sweep database only from a directory `sweep --dir` would accept.

The family (Hypothesis): the sweep directory's mode, its parent's mode and owner, drawn
from what a shared machine has (private, group-writable, world-writable with and without
the sticky bit, another user's). For each, the report and the sweep decide alike: where
``sweep --dir`` refuses the directory, ``workloads report DIR`` refuses it too, in one
line naming the directory problem, before the pickle is read (the database planted
there would create a file if it were). Before (issue 48): the report read a database from
under a parent everyone may write, which the sweep refuses.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.cli import main
from workloads.errors import WorkloadError
from workloads.sweep.command import sweep_directory

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another uid's directory needs root")


def _report(directory: Path) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["report", str(directory), "--output", str(directory.parent.parent / "r")])
    return code, err.getvalue()


@settings(max_examples=60, deadline=None)
@given(parent_mode=st.sampled_from([0o755, 0o775, 0o777, 0o1777, 0o757, 0o700]),
       parent_theirs=st.booleans(), mode=st.sampled_from([0o755, 0o700, 0o775, 0o757]))
def test_the_report_refuses_what_the_sweep_refuses(
        parent_mode: int, parent_theirs: bool, mode: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="report-trust-"))
    try:
        parent = root / "shared"
        directory = parent / "sweep"
        directory.mkdir(parents=True)
        directory.chmod(mode)
        parent.chmod(parent_mode)
        if parent_theirs:
            os.chown(parent, NOBODY, NOBODY)
        try:
            sweep_directory(directory, root / "spec.yaml")
            sweep_refuses = False
        except WorkloadError:
            sweep_refuses = True
        # Where the sweep refuses, a database that creates a file when read: it must never be
        # read. Where it accepts, the file is the user's own (its callables are trusted, as
        # workloads/pickle_walk.py says): a list, which the report refuses for what it holds.
        created = root / "pwned"
        hostile = f"cbuiltins\nopen\n(V{created}\nVw\ntR.".encode()
        (directory / "database.pk").write_bytes(hostile if sweep_refuses else b"]q\x00.")
        (directory / "database.pk").chmod(0o644)
        code, err = _report(directory)
        assert code == 2 and not created.exists()
        line = err.strip()
        assert "\n" not in line and len(line) <= 200
        about_the_directory = "writable by" in line or "owned by uid" in line
        assert about_the_directory == sweep_refuses, (oct(parent_mode), parent_theirs,
                                                      oct(mode), line)
    finally:
        shutil.rmtree(root)
