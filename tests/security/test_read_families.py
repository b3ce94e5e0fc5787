"""Issue 48, item 4, for the readers: each family of hostile inputs, through the real CLI.

Each test writes its generated corpus (:mod:`tests.security.corpus`, fixed seed)
into a sandbox, runs the command a user would run on each input in a child held
to ``RLIMIT_AS`` (:mod:`tests.security.harness`), and asserts, for every input:
exit 2, one stderr line of at most 200 printable characters, peak memory at most
the budget above the same command's baseline (its peak on a small refused input),
wall time within the budget, nothing changed outside the trusted directory. The
budgets and the measured worst case are printed (``pytest -s``) as a table row.

TensorFlow is never imported: every command here refuses its input before that.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from tests.security import corpus
from tests.security.harness import Budget, FamilyReport, Sandbox, baseline, run_child

pytestmark = pytest.mark.timeout(900)


def _spec_argv(spec: Path, box: Sandbox) -> list[str]:
    return ["sweep", str(spec), "--dry-run", "--dir", str(box.trusted / "sweep")]


def test_sweep_specs_are_refused_within_budget(tmp_path: Path) -> None:
    """Deep YAML, huge ranges and grids, long value lists, 5000-digit ints, mixed keys,
    a FIFO and a link given as the spec."""
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=20)
    base = box.trusted / "base.yaml"
    base.write_text("workload: style\n")
    report = FamilyReport("sweep spec (`workloads sweep SPEC --dry-run`)", budget)
    report.baseline_mib = baseline(_spec_argv(base, box), box, budget)
    cases = corpus.spec_family()
    fifo = box.trusted / "fifo.yaml"
    os.mkfifo(fifo)
    link = box.trusted / "link.yaml"
    link.symlink_to(box.outside / "victim.txt")
    for name, data in cases:
        spec = box.trusted / f"{name}.yaml"
        spec.write_bytes(data)
        report.add(name, run_child(_spec_argv(spec, box), box, budget))
    report.add("fifo", run_child(_spec_argv(fifo, box), box, budget))
    report.add("link", run_child(_spec_argv(link, box), box, budget))
    report.check()


def test_record_logs_are_refused_within_budget(tmp_path: Path) -> None:
    """records.jsonl files of 12-16 MiB whose values would be hundreds of MiB as objects."""
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=30)
    out = str(box.trusted / "report")
    empty = box.trusted / "empty" / "records.jsonl"
    empty.parent.mkdir()
    empty.write_bytes(b"")
    report = FamilyReport("records log (`workloads report records.jsonl`)", budget)
    report.baseline_mib = baseline(["report", str(empty), "-o", out], box, budget)
    for name, data in corpus.records_family():
        log = box.trusted / name / "records.jsonl"
        log.parent.mkdir()
        log.write_bytes(data)
        report.add(name, run_child(["report", str(log), "-o", out], box, budget))
    fifo = box.trusted / "fifo.jsonl"
    os.mkfifo(fifo)
    report.add("fifo", run_child(["report", str(fifo), "-o", out], box, budget))
    many = box.trusted / "many-logs"  # each log under its own cap, together far over
    for index in range(4):
        run = many / f"run{index}"
        run.mkdir(parents=True)
        (run / "records.jsonl").write_bytes(b'{"workload":"x"}\n' * 300_000)
        (run / f"r{index}.json").write_bytes(b'{"workload":"x","a":[' + b"0," * 600_000 + b"0]}")
    report.add("many-logs", run_child(["report", *map(str, sorted(many.glob("*/*"))), "-o", out],
                                      box, budget))
    report.add("many-records", run_child(["report", str(many), "-o", out], box, budget))
    report.check()


def test_monitor_csvs_are_refused_within_budget(tmp_path: Path) -> None:
    """Wide, long and malformed GPU monitor CSVs (`workloads report run.gpu.csv`)."""
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=30)
    out = str(box.trusted / "report")
    small = box.trusted / "small.gpu.csv"
    small.write_bytes(b"time_s,gpu\n")
    report = FamilyReport("GPU monitor CSV (`workloads report x.gpu.csv`)", budget)
    report.baseline_mib = baseline(["report", str(small), "-o", out], box, budget)
    for name, data in corpus.csv_family():
        path = box.trusted / f"{name}.gpu.csv"
        path.write_bytes(data)
        report.add(name, run_child(["report", str(path), "-o", out], box, budget))
    report.check()


def _cifar_argv(archive: Path, box: Sandbox) -> list[str]:
    return ["cifar10", "--data", "cifar10", "--data-dir", str(archive),
            "--output", str(box.trusted / "results" / "run.json")]


def _cifar_env(box: Sandbox, archive: Path) -> dict[str, str]:
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    return box.env({"WORKLOADS_CIFAR10_SHA256": digest})


def test_cifar10_archives_are_refused_within_budget(tmp_path: Path) -> None:
    """Memoised pickle calls, long label arrays, pax and GNU sparse maps (checksum matched)."""
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=20)
    report = FamilyReport("CIFAR-10 archive (`workloads cifar10 --data-dir A`)", budget)
    small = box.trusted / "small" / "cifar-10-python.tar.gz"
    small.parent.mkdir()
    small.write_bytes(b"not a gzip file")
    report.baseline_mib = baseline(_cifar_argv(small, box), box, budget, _cifar_env(box, small))
    for name, data in corpus.archive_family():
        archive = box.trusted / name / "cifar-10-python.tar.gz"
        archive.parent.mkdir()
        archive.write_bytes(data)
        report.add(name, run_child(_cifar_argv(archive, box), box, budget,
                                   env=_cifar_env(box, archive)))
    report.check()
