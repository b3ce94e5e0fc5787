"""No write of the sweep or of a record follows anything planted in a directory it writes in.

The family: every file the sweep and the records open in place (its lock, the
database lock, a run's directory and claim, ``records.jsonl``; the database is
read from there too) times every kind of entry someone could leave at its name
(links to a file, to ``/dev/null``, to a fifo, dangling; a hard link; a directory;
a fifo; another user's file). For each: the file outside is untouched (content
and mtime, or still absent), and the refusal is one short line naming the path.
The tests run as root, the victim; "another user" is uid 65534.

Then the directory itself: a sweep directory that is not yours alone, or that
sits under a directory everyone may write without the sticky bit, is refused
before ``.sweep.lock`` exists in it; and the command line, end to end, for the
two cases that were shown (a ``.sweep.lock`` link in a shared directory, a
``records.jsonl`` link beside a workload's output).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sweep.conftest import FAKE, REPO, calls, read_db, sweep_cli, write_spec
from workloads import records
from workloads.errors import WorkloadError
from workloads.safefs import UnsafePath
from workloads.sweep.database import SweepDatabase
from workloads.sweep.expand import expand
from workloads.sweep.lock import claim_run, sweep_lock
from workloads.sweep.spec import load_spec

NOBODY = 65534
RUN = "0123abcd"  # a run directory's name (any pset id)
VICTIM_TEXT = b"export PATH=/usr/bin  # the victim's file, no newline at its end"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another uid's files needs root")


def _hold_sweep_lock(directory: Path) -> None:
    with sweep_lock(directory):
        pass


def _append_record(directory: Path) -> None:
    records.append_line(directory / records.LOG_NAME, b'{"workload": "x"}\n')


def _write_record(directory: Path) -> None:
    records.write_record(records.new_record("x"), directory / "run.json")


# The files, each with the call that writes (or, for the database, reads) it.
WRITERS: dict[str, Callable[[Path], object]] = {
    ".sweep.lock": _hold_sweep_lock,
    ".database.lock": lambda d: SweepDatabase(d).check_writable(),
    "database.pk": lambda d: SweepDatabase(d).read(),
    f"{RUN}/.run.lock": lambda d: os.close(claim_run(d / RUN)),
    RUN: lambda d: os.close(claim_run(d / RUN)),
    "records.jsonl": _append_record,
    "records.jsonl (write_record)": _write_record,
}


class Outside:
    """The victim's things outside the directory, and a snapshot to compare against."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.file = root / "bashrc"
        self.file.write_bytes(VICTIM_TEXT)
        self.dir = root / "home"
        self.dir.mkdir()
        (self.dir / "notes").write_bytes(VICTIM_TEXT)
        self.fifo = root / "fifo"
        os.mkfifo(self.fifo)
        self.absent = root / "created-by-the-sweep"

    def snapshot(self) -> dict[str, object]:
        def state(path: Path) -> object:
            if not os.path.lexists(path):
                return None
            info = os.lstat(path)
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            return (stat.S_IFMT(info.st_mode), info.st_mtime_ns, info.st_nlink, data)

        paths = [self.file, self.dir, self.dir / "notes", self.fifo, self.absent]
        listing = sorted(os.listdir(self.dir))
        return {str(p): state(p) for p in paths} | {"listing": listing}


def _plant(kind: str, where: Path, outside: Outside) -> None:
    """Leave ``kind`` at ``where``, owned (where that means anything) by the other user."""
    where.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink to a file outside":  # in place of a run directory: the victim's home
        where.symlink_to(outside.dir if where.name == RUN else outside.file)
    elif kind == "symlink to /dev/null":
        where.symlink_to("/dev/null")
    elif kind == "symlink to a fifo outside":
        where.symlink_to(outside.fifo)
    elif kind == "dangling symlink":
        where.symlink_to(outside.absent)
    elif kind == "hard link to a file outside":
        os.link(outside.file, where)
    elif kind == "directory":
        where.mkdir()
        (where / "inside").write_bytes(b"x")
    elif kind == "regular file":
        where.write_bytes(b"not a directory")
    elif kind == "fifo":
        os.mkfifo(where)
    elif kind == "another user's file":
        where.write_bytes(b"theirs, no newline")
    elif kind == "another user's directory":
        where.mkdir()
    else:
        raise AssertionError(kind)
    if kind.startswith("another user"):
        os.chown(where, NOBODY, NOBODY)
    elif kind.endswith("symlink") or kind.startswith("symlink"):
        os.lchown(where, NOBODY, NOBODY)


FILE_KINDS = [
    "symlink to a file outside", "symlink to /dev/null", "symlink to a fifo outside",
    "dangling symlink", "hard link to a file outside", "directory", "fifo",
    "another user's file",
]
# In place of a run directory: everything but a directory of our own.
DIR_KINDS = [
    "symlink to a file outside", "symlink to /dev/null", "dangling symlink",
    "hard link to a file outside", "regular file", "fifo", "another user's directory",
]
CASES = [
    (name, kind)
    for name in WRITERS
    for kind in (DIR_KINDS if name == RUN else FILE_KINDS)
]


def _sweep_directory(tmp_path: Path) -> Path:
    directory = tmp_path / "sweep"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    return directory


def assert_one_short_line(text: str, names: str, typed_in: Path | None = None) -> None:
    """With `typed_in`, the paths under it count as typed there (relative): the limit is on
    the text around them, not on where pytest put its temporary directory."""
    measured = text.replace(f"{typed_in}/", "") if typed_in is not None else text
    assert "\n" not in text and len(measured) < 200, text
    assert names in text, text


@pytest.mark.parametrize(("name", "kind"), CASES, ids=[f"{n}-{k}" for n, k in CASES])
def test_a_planted_entry_is_refused_and_what_it_points_to_is_untouched(
    tmp_path: Path, name: str, kind: str
) -> None:
    directory = _sweep_directory(tmp_path)
    outside = Outside(tmp_path / "victim")
    planted = directory / name.split(" ")[0]
    _plant(kind, planted, outside)
    before = outside.snapshot()
    with pytest.raises(WorkloadError) as refused:
        WRITERS[name](directory)
    assert outside.snapshot() == before
    assert_one_short_line(refused.value.one_line(), planted.name, typed_in=tmp_path)


def test_a_run_directory_left_group_writable_is_tightened_and_claimed(tmp_path: Path) -> None:
    """Ours, made by an older version under umask 002: its mode is fixed, not refused."""
    directory = _sweep_directory(tmp_path)
    (directory / RUN).mkdir()
    (directory / RUN).chmod(0o775)
    os.close(claim_run(directory / RUN))
    assert stat.S_IMODE((directory / RUN).stat().st_mode) == 0o755


# --- the directory is checked before anything is opened in it --------------------------

@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.integers(0, 0o7777), theirs=st.booleans())
def test_the_directory_is_checked_before_the_lock_exists(
    tmp_path: Path, mode: int, theirs: bool
) -> None:
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    os.chmod(directory, mode)
    if theirs:
        os.chown(directory, NOBODY, NOBODY)
    trusted = not theirs and not mode & 0o022
    try:
        _hold_sweep_lock(directory)
    except UnsafePath as exc:
        assert not trusted, exc
        assert not os.path.lexists(directory / ".sweep.lock")
        assert_one_short_line(exc.one_line(), "directory", typed_in=tmp_path)
    else:
        assert trusted, oct(mode)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.integers(0, 0o7777), depth=st.integers(1, 3))
def test_a_directory_above_that_others_may_write_needs_the_sticky_bit(
    tmp_path: Path, mode: int, depth: int
) -> None:
    """Whoever else may write a directory above could rename the sweep's and put a link there.

    One rule for every directory on the way (and for records and the bind library):
    writable by neither group nor others unless sticky.
    """
    top = Path(tempfile.mkdtemp(dir=tmp_path)).resolve()
    directory = top.joinpath(*["d"] * depth)
    directory.mkdir(parents=True, mode=0o755)
    os.chmod(top, mode)
    unsafe = bool(mode & 0o022) and not mode & stat.S_ISVTX
    try:
        _hold_sweep_lock(directory)
    except UnsafePath as exc:
        assert unsafe, exc
        assert not os.path.lexists(directory / ".sweep.lock")
        who = "all" if mode & stat.S_IWOTH else "its group"
        assert exc.path == top and exc.reason == f"is writable by {who} (mode {mode:o}, not sticky)"
        assert_one_short_line(exc.one_line(), f"{top.name} is writable by {who}")
    else:
        assert not unsafe, oct(mode)
    finally:
        os.chmod(top, 0o755)


# --- end to end, the command line ------------------------------------------------------

def _one_run_spec(tmp_path: Path) -> Path:
    return write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "output": "out.png", "defaults": {"sleep": 0.0},
        "vary": {"value": [0.5]},
    })


def _errors(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert "Traceback" not in result.stderr, result.stderr
    return [line for line in result.stderr.splitlines() if "error:" in line]


def test_a_shared_directory_is_refused_before_its_planted_lock_is_written(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    """The shown case: another user's directory with ``.sweep.lock -> ~victim/.bashrc``."""
    outside = Outside(tmp_path / "victim")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    _plant("symlink to a file outside", shared / ".sweep.lock", outside)
    os.chown(shared, NOBODY, NOBODY)
    before = outside.snapshot()
    result = sweep_cli([str(_one_run_spec(tmp_path)), "--dir", str(shared)], sweep_env)
    assert result.returncode == 2, result.stderr
    errors = _errors(result)
    assert len(errors) == 1 and "is owned by uid 65534, not by you" in errors[0], errors
    assert outside.snapshot() == before
    assert calls(sweep_env) == []


def test_a_planted_lock_in_your_own_directory_is_refused(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    outside = Outside(tmp_path / "victim")
    directory = _sweep_directory(tmp_path)
    _plant("symlink to a file outside", directory / ".sweep.lock", outside)
    before = outside.snapshot()
    result = sweep_cli([str(_one_run_spec(tmp_path)), "--dir", str(directory)], sweep_env)
    assert result.returncode == 2, result.stderr
    errors = _errors(result)
    assert len(errors) == 1 and ".sweep.lock is a symbolic link" in errors[0], errors
    assert len(errors[0]) < 200
    assert outside.snapshot() == before


def test_a_planted_run_directory_leaves_that_run_out_and_the_sweep_goes_on(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "output": "out.png", "defaults": {"sleep": 0.0},
        "vary": {"value": [0.25, 0.5]},
    })
    planted = expand(load_spec(spec))[0]
    outside = Outside(tmp_path / "victim")
    directory = _sweep_directory(tmp_path)
    (directory / planted.pset_id).symlink_to(outside.dir)  # the victim's home, as a run dir
    before = outside.snapshot()
    result = sweep_cli([str(spec), "--dir", str(directory)], sweep_env)
    assert result.returncode == 1, result.stderr  # one run not run
    words = " ".join(result.stderr.split())
    assert f"{planted.pset_id} is a symbolic link" in words and "not run by this sweep" in words
    assert outside.snapshot() == before
    assert list(read_db(directory)["_pset_id"]) != [planted.pset_id]
    assert len(read_db(directory)) == 1


def test_a_workload_never_appends_through_a_planted_records_log(tmp_path: Path) -> None:
    """The shown case: ``records.jsonl`` a link beside the output; its target was cut."""
    outside = Outside(tmp_path / "victim")
    results = tmp_path / "results"
    _plant("symlink to a file outside", results / "records.jsonl", outside)
    before = outside.snapshot()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", FAKE, "--output", str(results / "run.json")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2, result.stderr
    errors = _errors(result)
    assert len(errors) == 1 and "records.jsonl beside it is a symbolic link" in errors[0], errors
    assert "the record is safe in" in errors[0] and "results/run.json" in errors[0]
    assert (results / "run.json").exists()
    assert outside.snapshot() == before
