"""Every directory on a path is judged by one rule, links resolved: a link planted at any depth.

The rule (workloads/safefs.py ``foreign_writer``): owned by root or by you, and
writable by neither group nor others unless sticky. Three users of it: a sweep
directory (its lock, its database), a records directory (``write_record``,
``records.jsonl``) and the worker bind library's private directory. Shown before:
``--dir`` through a link in a world-writable, non-sticky directory was accepted and
``.sweep.lock`` written in the link's target; ``records.append_line`` followed a
linked parent into another directory's ``records.jsonl``; a group-writable parent
passed the sweep and failed the bind shim.

Here a link is planted at each depth of a four-level path, inside a directory that
someone else could write (everyone, the group, or another uid owns it), pointing at a
directory of the victim's: every user refuses, nothing is written in the target. The
same link in a directory only root and the victim can write is followed, and the
writes land in its target. And for any mode and owner of one directory on the way,
Hypothesis checks that the three users decide alike.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads import records
from workloads.errors import WorkloadError
from workloads.netbind import library
from workloads.safefs import UnsafePath, resolve_directory
from workloads.sweep.database import SweepDatabase
from workloads.sweep.lock import sweep_lock

NOBODY = 65534
DEPTHS = [1, 2, 3, 4]
UNTRUSTED = {"everyone, not sticky": (0o777, 0), "its group": (0o775, 0),
             "another uid": (0o755, NOBODY)}

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another uid's files needs root")


def _hold_sweep_lock(directory: Path) -> None:
    with sweep_lock(directory):
        pass


def _write_record(directory: Path) -> None:
    records.write_record(records.new_record("x"), directory / "run.json")


def _append_log(directory: Path) -> None:
    records.append_line(directory / records.LOG_NAME, b'{"workload": "x"}\n')


def _bind_library_directory(directory: Path) -> None:
    found, problem = library.private_directory(directory / f"netbind-{os.geteuid()}", create=True)
    if found is None:
        raise WorkloadError(f"no private directory: {problem}")


USERS: dict[str, Callable[[Path], None]] = {
    "sweep lock": _hold_sweep_lock,
    "sweep database": lambda d: SweepDatabase(d).check_writable(),
    "record": _write_record,
    "records.jsonl": _append_log,
    "bind library": _bind_library_directory,
}


def _layout(tmp_path: Path, depth: int) -> tuple[Path, Path]:
    """``tmp/p/l1/l2/l3/l4`` with ``l<depth>`` a link to ``tmp/victim/l<depth>/...``."""
    top = tmp_path / "p"
    target_top = tmp_path / "victim"
    parts = [f"l{n}" for n in DEPTHS]
    real = target_top.joinpath(*parts[depth - 1:])
    real.mkdir(parents=True)
    holder = top.joinpath(*parts[:depth - 1])
    holder.mkdir(parents=True, exist_ok=True)
    (holder / parts[depth - 1]).symlink_to(target_top / parts[depth - 1])
    for directory in [tmp_path, *top.rglob("*"), top, *target_top.rglob("*"), target_top]:
        if directory.is_dir() and not directory.is_symlink():
            directory.chmod(0o755)
    return top.joinpath(*parts), target_top


def _written(target_top: Path) -> list[str]:
    return sorted(str(p.relative_to(target_top)) for p in target_top.rglob("*")
                  if not p.is_dir() or p.name.startswith("netbind"))


CASES = [(user, depth, how) for user in USERS for depth in DEPTHS for how in UNTRUSTED]


@pytest.mark.parametrize(("user", "depth", "how"), CASES,
                         ids=[f"{u}-depth{d}-{h}" for u, d, h in CASES])
def test_a_link_in_a_directory_others_can_write_is_refused_at_every_depth(
    tmp_path: Path, user: str, depth: int, how: str
) -> None:
    path, target_top = _layout(tmp_path, depth)
    holder = path.parents[len(DEPTHS) - depth]  # the directory the link sits in
    mode, owner = UNTRUSTED[how]
    os.chmod(holder, mode)
    os.chown(holder, owner, owner)
    with pytest.raises(WorkloadError) as refused:
        USERS[user](path)
    line = refused.value.one_line()
    assert "\n" not in line and len(line) < 170, line
    assert str(holder.name) in line or "netbind" in line, line
    assert _written(target_top) == []  # nothing landed where the link points


@pytest.mark.parametrize(("user", "depth"), [(u, d) for u in USERS for d in DEPTHS])
def test_a_link_where_only_root_and_you_can_write_is_followed(
    tmp_path: Path, user: str, depth: int
) -> None:
    path, target_top = _layout(tmp_path, depth)
    USERS[user](path)
    assert _written(target_top) != []  # the writes landed in the link's target
    fd, real = resolve_directory(path)
    os.close(fd)
    assert real == Path(os.path.realpath(path))


def test_a_link_of_another_uid_in_a_sticky_directory_is_not_followed(tmp_path: Path) -> None:
    """/tmp-like: anyone may create a name there, so the link's owner must be root or you."""
    path, target_top = _layout(tmp_path, 2)
    holder = path.parents[2]
    os.chmod(holder, 0o1777)
    os.lchown(holder / "l2", NOBODY, NOBODY)
    with pytest.raises(UnsafePath, match="is a symbolic link of uid 65534"):
        _write_record(path)
    assert _written(target_top) == []


def test_a_link_into_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    """The link sits somewhere safe; what it leads through is checked as well."""
    path, target_top = _layout(tmp_path, 3)
    os.chmod(target_top, 0o777)
    for user in USERS.values():
        with pytest.raises(WorkloadError, match="victim is writable by all"):
            user(path)
    assert _written(target_top) == []


def test_a_link_loop_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(UnsafePath, match="more than 40 links"):
        _write_record(tmp_path / "a" / "c")


# --- one rule: the three users decide alike for any mode and owner on the way -----------

def _decision(user: Callable[[Path], None], path: Path) -> bool:
    try:
        user(path)
    except WorkloadError:
        return False
    return True


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.integers(0, 0o7777), owner=st.sampled_from([0, os.geteuid(), NOBODY]),
       depth=st.integers(1, 3))
def test_sweep_records_and_bind_library_judge_a_directory_alike(
    tmp_path_factory: pytest.TempPathFactory, mode: int, owner: int, depth: int
) -> None:
    top = tmp_path_factory.mktemp("rule")
    directory = top.joinpath(*["d"] * (depth + 1))
    directory.mkdir(parents=True, mode=0o755)
    judged = top.joinpath(*["d"] * depth)  # a directory on the way, not the last
    os.chmod(judged, mode | stat.S_IXUSR)  # searchable, so the question is only trust
    os.chown(judged, owner, owner)
    trusted = owner in (0, os.geteuid()) and (not mode & 0o022 or bool(mode & stat.S_ISVTX))
    decisions = {name: _decision(user, directory) for name, user in USERS.items()}
    assert set(decisions.values()) == {trusted}, (oct(mode), owner, decisions)
