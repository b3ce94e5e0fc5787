"""A full disk at a run's start: that run is not started, the others finish, nothing is lost.

The disk is real: a small tmpfs the test mounts (tests run as root), filled with
page-sized files until the kernel answers ``ENOSPC``. One run's directory is a
bind mount of a folder on it, so only that run meets the full disk, at the
write of its claim (no page left) or of its log's first line (one page left,
which the claim takes); the run already in flight lives on the ordinary disk
and finishes. The sweep then keeps the run first in line and tries again at
every poll: given space, it runs it; never given any, it ends with one line once
nothing is in flight, and the next sweep runs what was not started.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sweep.conftest import (
    FAKE,
    StreamedSweep,
    calls,
    read_db,
    sweep_cli,
    wait_until,
    write_spec,
)
from workloads.sweep.expand import Pset, expand
from workloads.sweep.spec import load_spec

PAGE = 4096

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    """Mount points the test made: unmounted at the end, last first."""
    made: list[Path] = []
    yield made
    for path in reversed(made):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def mount(args: list[str], target: Path, mounts: list[Path]) -> None:
    done = subprocess.run(["mount", *args, str(target)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here ({' '.join(args)}): {done.stderr.strip()}")
    mounts.append(target)


class FullDisk:
    """A tmpfs at ``root`` filled to the last page but ``free_pages``; ``free()`` empties it."""

    def __init__(self, root: Path, free_pages: int, mounts: list[Path]) -> None:
        self.root = root
        root.mkdir()
        mount(["-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs"], root, mounts)
        self.fillers: list[Path] = []
        while True:
            filler = root / f"filler-{len(self.fillers)}"
            try:
                filler.write_bytes(b"\0" * PAGE)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                filler.unlink()
                break
            self.fillers.append(filler)
        for _ in range(free_pages):
            self.fillers.pop().unlink()

    def free(self) -> None:
        for filler in self.fillers:
            filler.unlink()
        self.fillers = []


def setup(
    tmp_path: Path, free_pages: int, mounts: list[Path]
) -> tuple[Path, Path, list[Pset], FullDisk]:
    """Three runs gated by tokens; the second's directory on the full disk."""
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    spec = write_spec(tmp_path / "s.yaml", {
        "workload": FAKE, "mode": "grid", "output": "out.png",
        "defaults": {"tokens": str(tokens)}, "vary": {"value": [0.25, 0.5, 0.75]},
    })
    plan = expand(load_spec(spec))
    directory = tmp_path / "d"
    directory.mkdir(mode=0o755)
    disk = FullDisk(tmp_path / "disk", free_pages, mounts)
    on_disk = disk.root / "run"
    on_disk.mkdir(mode=0o755)
    run = directory / plan[1].pset_id
    run.mkdir(mode=0o755)
    mount(["--bind", str(on_disk)], run, mounts)
    return spec, directory, plan, disk


def started(env: dict[str, str]) -> Counter[str]:
    return Counter(Path(c["output"]).parent.name for c in calls(env) if c["event"] == "start")


def test_a_run_that_cannot_start_waits_for_space_while_the_others_go_on(
    tmp_path: Path, sweep_env: dict[str, str], mounts: list[Path]
) -> None:
    spec, directory, plan, disk = setup(tmp_path, 0, mounts)
    sweep = StreamedSweep([str(spec), "--dir", str(directory), "--per-device", "2"], sweep_env)
    try:
        wait_until(lambda: "No space left on device" in sweep.words, 120, "a failed start")
        assert f"cannot start run {plan[1].pset_id} in {directory}" in sweep.words
        assert "not started, runs in flight go on" in sweep.words
        wait_until(lambda: bool(started(sweep_env)), 120, "the first run to start")
        assert started(sweep_env) == {plan[0].pset_id: 1}  # only the first is running
        disk.free()
        wait_until(lambda: "runs start again" in sweep.words, 120, "the start once freed")
        (tmp_path / "tokens" / "open").touch()
        assert sweep.wait() == 0, sweep.words
    finally:
        sweep.process.kill()
        sweep.process.wait()
    assert "Traceback" not in sweep.words
    assert len(read_db(directory)) == 3
    assert started(sweep_env) == {p.pset_id: 1 for p in plan}  # each ran once


@pytest.mark.parametrize("free_pages", [0, 1], ids=["at the claim", "at the log"])
def test_with_no_space_ever_the_sweep_ends_in_one_line_and_loses_nothing(
    tmp_path: Path, sweep_env: dict[str, str], mounts: list[Path], free_pages: int
) -> None:
    spec, directory, plan, disk = setup(tmp_path, free_pages, mounts)
    args = [str(spec), "--dir", str(directory), "--per-device", "2"]
    sweep = StreamedSweep(args, {**sweep_env, "WORKLOADS_SWEEP_DB_RETRY_S": "0"})
    try:
        wait_until(lambda: "No space left on device" in sweep.words, 120, "a failed start")
        (tmp_path / "tokens" / "open").touch()  # the run in flight ends; the disk stays full
        assert sweep.wait() == 2, sweep.words
    finally:
        sweep.process.kill()
        sweep.process.wait()
    text = "".join(sweep.lines)
    errors = [line for line in text.splitlines() if "error:" in line]
    assert "Traceback" not in text and len(errors) == 1, text
    assert f"cannot start run {plan[1].pset_id}" in errors[0]
    assert "(No space left on device)" in errors[0] and "run the sweep again" in errors[0]
    assert len(errors[0]) < 200 + len(str(directory))
    assert list(read_db(directory)["_pset_id"]) == [plan[0].pset_id]  # kept
    assert started(sweep_env) == {plan[0].pset_id: 1}
    run = directory / plan[1].pset_id  # where its last start stopped: claim or log
    assert ((run / ".run.lock").stat().st_size > 0) == (free_pages == 1)
    assert (run / "run.log").exists() == (free_pages == 1)
    disk.free()
    again = sweep_cli(args, sweep_env)
    assert again.returncode == 0, again.stderr
    assert len(read_db(directory)) == 3
    assert started(sweep_env) == {p.pset_id: 1 for p in plan}  # nothing ran twice


def test_a_full_disk_at_the_sweeps_start_is_one_line(
    tmp_path: Path, sweep_env: dict[str, str], mounts: list[Path]
) -> None:
    spec, _, _, disk = setup(tmp_path, 0, mounts)
    result = sweep_cli([str(spec), "--dir", str(disk.root)], sweep_env)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert "(No space left on device)" in errors[0]
    assert calls(sweep_env) == []
