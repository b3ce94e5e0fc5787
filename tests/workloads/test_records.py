"""Records: atomic writes, the JSON-lines log, early output checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from workloads import records
from workloads.errors import WorkloadError


def test_write_record_is_complete_and_logged(tmp_path: Path) -> None:
    rec = records.new_record("cifar10", examples_per_sec=np.float32(12.5), path=tmp_path)
    out = records.write_record(rec, tmp_path / "a.json")
    records.write_record(records.new_record("style"), tmp_path / "b.json")
    assert json.loads(out.read_text())["examples_per_sec"] == 12.5
    log = records.read_log(tmp_path / records.LOG_NAME)
    assert [r["workload"] for r in log] == ["cifar10", "style"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_torn_last_log_line_is_skipped(tmp_path: Path) -> None:
    log = tmp_path / "records.jsonl"
    log.write_text('{"workload": "a"}\n{"workload": "b", "tru')
    assert records.read_log(log) == [{"workload": "a"}]


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        records.atomic_write_bytes(target, object())  # type: ignore[arg-type]
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_unwritable_output_fails_before_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(WorkloadError, match=r"cannot write to .*choose a writable --output"):
        records.ensure_writable(blocker / "sub" / "out.json")
    with pytest.raises(WorkloadError, match="is a directory"):
        records.ensure_writable(tmp_path)


def test_read_record_rejects_non_records(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(WorkloadError, match="not a workloads record"):
        records.read_record(tmp_path / "x.json")


# --- a full disk: the record file is safe, the log never holds a torn line ----------------

_FULL_DISK_CHILD = """
import resource, signal, sys
from pathlib import Path
from workloads import records
from workloads.errors import WorkloadError

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so write() fails with EFBIG, as on a full disk
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    records.write_record(records.new_record("cifar10", note="x" * 300), Path(sys.argv[1]))
except WorkloadError as exc:
    print(exc.one_line())
    sys.exit(exc.exit_code)
"""


def test_a_log_append_that_hits_the_size_limit_leaves_no_torn_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    log = tmp_path / records.LOG_NAME
    earlier = json.dumps({"workload": "style", "pad": "y" * 200}) + "\n"
    log.write_text(earlier * 10)
    limit = log.stat().st_size + 100  # room for the record file, not for the whole log line
    result = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(tmp_path / "run.json"), str(limit)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and "the record is safe in" in lines[0] and "File too large" in lines[0]
    assert json.loads((tmp_path / "run.json").read_text())["note"] == "x" * 300
    assert log.read_text() == earlier * 10  # cut back to where it ended
    # The next record, with room again, is read back whole: nothing glued to a torn line.
    records.write_record(records.new_record("next"), tmp_path / "next.json")
    assert [r["workload"] for r in records.read_log(log)] == ["style"] * 10 + ["next"]


def test_a_torn_last_line_is_cut_before_appending(tmp_path: Path) -> None:
    log = tmp_path / records.LOG_NAME
    log.write_text('{"workload": "a"}\n{"workload": "b", "tru')
    records.write_record(records.new_record("c"), tmp_path / "c.json")
    assert [r["workload"] for r in records.read_log(log)] == ["a", "c"]
    assert log.read_text().startswith('{"workload": "a"}\n{"schema"')
