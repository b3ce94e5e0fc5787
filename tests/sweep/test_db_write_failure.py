"""A database write that fails (here: a file-size limit, EFBIG, standing in for ENOSPC/EIO).

The sweep runs under ``RLIMIT_FSIZE`` small enough for every run's own files but
not for ``database.pk``; ``SIGXFSZ`` is ignored so the write fails with ``EFBIG``
as it would with a full disk. Nothing measured may be lost: the runs in flight
finish, and their rows land now (the limit lifted) or at the next start (adopted).
"""

from __future__ import annotations

import resource
import sys
from collections import Counter
from pathlib import Path

from tests.sweep.conftest import (
    StreamedSweep,
    calls,
    fake_spec,
    read_db,
    sweep_cli,
    wait_until,
)

LIMIT = 1500  # bytes: a run's record (~400) fits, a database of one row (~4000) does not

_LIMITED = f"""
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({LIMIT}, resource.RLIM_INFINITY))
sys.argv = ["workloads", "sweep", *sys.argv[1:]]
runpy.run_module("workloads", run_name="__main__")
"""


def limited_sweep(args: list[str], env: dict[str, str]) -> StreamedSweep:
    """The sweep under the limit; its output through a pipe (a log file would hit the limit)."""
    return StreamedSweep(args, env, argv=[sys.executable, "-c", _LIMITED])


def test_runs_in_flight_finish_and_their_rows_land_at_the_next_start(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = fake_spec(tmp_path), tmp_path / "d"
    args = [str(spec), "--dir", str(directory), "--per-device", "2"]
    sweep = limited_sweep(args, {**sweep_env, "WORKLOADS_SWEEP_DB_RETRY_S": "0"})
    assert sweep.wait() == 2, sweep.text
    text = sweep.text
    errors = [line for line in text.splitlines() if "error:" in line]
    assert "Traceback" not in text and len(errors) == 1, text
    assert "cannot write" in errors[0] and "File too large" in errors[0]
    assert "run the sweep again" in errors[0]
    assert not (directory / "database.pk").exists()
    events = Counter((c["event"], c["output"]) for c in calls(sweep_env))
    ended = {out for (event, out) in events if event == "end"}
    assert len(ended) == 2 and all(events[("start", out)] == 1 for out in ended)  # not stopped
    resumed = sweep_cli(args, sweep_env)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stderr.count("adopted run") == 2
    starts = Counter(c["output"] for c in calls(sweep_env) if c["event"] == "start")
    assert len(starts) == 6 and set(starts.values()) == {1}  # nothing measured twice
    assert len(read_db(directory)) == 6


def test_rows_are_kept_and_written_once_the_disk_takes_them_again(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    spec, directory = fake_spec(tmp_path), tmp_path / "d"
    env = {**sweep_env, "WORKLOADS_SWEEP_DB_RETRY_S": "300"}
    sweep = limited_sweep([str(spec), "--dir", str(directory), "--per-device", "2"], env)
    try:
        wait_until(lambda: "in memory and trying again" in sweep.words, 120, "a failed write")
        assert not (directory / "database.pk").exists()
        inf = resource.RLIM_INFINITY
        resource.prlimit(sweep.process.pid, resource.RLIMIT_FSIZE, (inf, inf))  # space freed
        assert sweep.wait() == 0, sweep.text
    finally:
        sweep.process.kill()
        sweep.process.wait()
    assert "written again: the sweep goes on" in sweep.words
    assert len(read_db(directory)) == 6
    starts = Counter(c["output"] for c in calls(sweep_env) if c["event"] == "start")
    assert len(starts) == 6 and set(starts.values()) == {1}
