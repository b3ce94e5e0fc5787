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
