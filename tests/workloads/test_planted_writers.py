"""No writer follows a link planted for it: every entry at the name and on the way, every writer.

The family, generated: each writer the CLI runs (``workloads report --fleet``, ``--history``,
a records report with its matplotlib figure, the GPU monitor's CSV, the scaling study's
CSV, a model saved by Keras's ``model.save(name)`` through the cifar10 command's own
save, the download cache) times each thing someone
could leave where it writes (a link to a file outside, a dangling link, a hard link to
a file outside, a fifo, at the file's name; another user's link at each directory
component of the output path; a directory on the way that everyone may write). For
each: the command exits 2 with one printable line under 200 characters, and nothing
outside the trusted directory is created or changed (content, mtime, links, listing).

Before (issue 48): figures went through ``savefig(path)``, the monitor and the scaling
study opened their CSVs with ``open(path, "w")``, and directories were made with
``mkdir(parents=True)`` before any check: each of these wrote through the link.
The tests run as root, the victim; "another user" is uid 65534.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.records import record as fleet_record
from workloads.errors import WorkloadError

NOBODY = 65534
REPO = Path(__file__).resolve().parents[2]
VICTIM = b"the victim's file\n"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="planting another uid's links needs root")


class Outside:
    """The victim's directory outside the trusted one, and a snapshot of all of it."""

    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.root = root
        self.file = root / "bashrc"
        self.file.write_bytes(VICTIM)
        self.dir = root / "home"
        self.dir.mkdir()
        self.absent = root / "created-by-the-writer"

    def snapshot(self) -> dict[str, object]:
        state: dict[str, object] = {}
        for path in sorted(self.root.rglob("*")):
            info = os.lstat(path)
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            state[str(path)] = (stat.S_IFMT(info.st_mode), info.st_mtime_ns, info.st_nlink, data)
        return state


def plant_at_file(kind: str, where: Path, outside: Outside) -> None:
    where.parent.mkdir(parents=True, exist_ok=True)
    if kind == "link to a file outside":
        where.symlink_to(outside.file)
    elif kind == "another user's link to a file outside":
        where.symlink_to(outside.file)
        os.lchown(where, NOBODY, NOBODY)
    elif kind == "dangling link":
        where.symlink_to(outside.absent)
    elif kind == "hard link to a file outside":
        os.link(outside.file, where)
    elif kind == "fifo":
        os.mkfifo(where)
    else:
        raise AssertionError(kind)


FILE_KINDS = ["link to a file outside", "another user's link to a file outside",
              "dangling link", "hard link to a file outside", "fifo"]
DEPTHS = [0, 1, 2]  # the output directory is trusted/a/b/c: a link in place of a, b or c


def plant_on_the_way(depth: int, output: Path, outside: Outside, *, open_parent: bool) -> None:
    """Another user's link in place of one directory of ``output``, into the victim's home.

    With ``open_parent``, the link is ours but the directory that holds it may be
    written by everyone (no sticky bit): anyone could have put it there.
    """
    parts = output.parts[-3:]
    base = Path(*output.parts[:-3])
    holder = base.joinpath(*parts[:depth])
    holder.mkdir(parents=True, exist_ok=True)
    link = holder / parts[depth]
    link.symlink_to(outside.dir, target_is_directory=True)
    if open_parent:
        holder.chmod(0o777)
    else:
        os.lchown(link, NOBODY, NOBODY)


# --- the writers, each as the CLI (or its module) runs it -------------------------------

def _workloads(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'scripts'}", "MPLBACKEND": "Agg"}
    return subprocess.run([sys.executable, "-m", "workloads", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _fleet_run(directory: Path) -> Path:
    run = directory / "run1"
    run.mkdir(parents=True)
    for index in range(3):
        rec = fleet_record(f"h{index}", gpus=1)
        rec["started_at"] = "2026-11-25T00:00:00Z"
        (run / f"h{index}.json").write_text(json.dumps(rec))
    return run


def _cpu_record(directory: Path) -> Path:
    from workloads.records import new_record

    rec = new_record("cifar10", status="ok", model="resnet50v2", backend="tensorflow",
                     data="synthetic", devices=["AMD EPYC 7B13"], replicas=1,
                     batch_size_per_replica=64, global_batch_size=64, precision="fp32",
                     xla=False, examples_per_sec=31.5, step_time_s=2.0,
                     epoch_times_s=[1600.0, 1590.0], accuracy=None,
                     env={"cpu": "AMD EPYC 7B13", "gpus": []})
    directory.mkdir(parents=True)
    path = directory / "r50-cpu.json"
    path.write_text(json.dumps(rec))
    return path


CLI_WRITERS: dict[str, tuple[str, Callable[[Path], list[str]]]] = {
    # name: (the file it writes in the output directory, its arguments given a work dir)
    "report --fleet": ("fleet.md", lambda work: [
        "report", "--fleet", str(_fleet_run(work / "in"))]),
    "report --history": ("history.html", lambda work: [
        "report", "--history", str(_fleet_run(work / "in").parent)]),
    "report RECORDS (savefig)": ("throughput.png", lambda work: [
        "report", str(_cpu_record(work / "in"))]),
}


def _assert_refused(result: subprocess.CompletedProcess[str], outside: Outside,
                    before: dict[str, object]) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    line = result.stderr.rstrip("\n")
    assert "\n" not in line and 0 < len(line) <= 200, result.stderr
    assert line.isprintable(), line
    assert "Traceback" not in result.stderr
    assert outside.snapshot() == before


CASES = [(writer, "file", kind) for writer in CLI_WRITERS for kind in FILE_KINDS] + [
    (writer, f"directory {depth}", how) for writer in CLI_WRITERS for depth in DEPTHS
    for how in ("another user's link", "a link in a directory everyone may write")]


@pytest.mark.parametrize(("writer", "where", "kind"), CASES,
                         ids=[f"{w}-{p}-{k}" for w, p, k in CASES])
def test_a_cli_writer_refuses_what_was_planted_and_leaves_the_outside_alone(
        tmp_path: Path, writer: str, where: str, kind: str) -> None:
    name, arguments = CLI_WRITERS[writer]
    work = tmp_path / "trusted"
    work.mkdir(mode=0o755)
    outside = Outside(tmp_path / "victim")
    args = arguments(work)
    output = work / "out" / "a" / "b"
    if where == "file":
        plant_at_file(kind, output / name, outside)
    else:
        plant_on_the_way(int(where.split()[1]), output, outside,
                         open_parent=kind.startswith("a link in"))
    before = outside.snapshot()
    result = _workloads(*args, "--output", str(output), cwd=tmp_path)
    _assert_refused(result, outside, before)


def test_the_same_writers_write_when_nothing_is_planted(tmp_path: Path) -> None:
    """The control: each writer, given a clean output directory, writes its file there."""
    for writer, (name, arguments) in CLI_WRITERS.items():
        work = tmp_path / writer.split()[1].strip("-")
        work.mkdir()
        output = work / "out" / "a" / "b"
        result = _workloads(*arguments(work), "--output", str(output), cwd=tmp_path)
        assert result.returncode == 0, (writer, result.stderr)
        assert (output / name).is_file() and not (output / name).is_symlink()


# --- writers with no CLI of their own here: the monitor, the study, Keras, the cache -----
# In process, not through the harness (tests/security/test_write_families.py runs the CLI
# writers above as children under RLIMIT_AS): no command reaches these without a GPU (the
# monitor), a study of many runs (the scaling CSV), a training run (the Keras save) or a mirror
# (the cache), so each is driven through the very function the command calls.

def _monitor(path: Path) -> None:
    from tfhost.monitor import GpuMonitor, GpuSampler

    from tests.host.fake_nvml import FakeNvml

    GpuMonitor(GpuSampler(FakeNvml()), path, interval_s=0.01).start().stop()


def _scaling_csv(path: Path) -> None:
    from tfhost.scaling import StudyPlan, write_summary

    write_summary([], StudyPlan(counts=[1], unit="CPU replicas"), path.parent)


@functools.cache
def _keras_model() -> Any:
    import keras  # TensorFlow's Keras: imported once for the whole family

    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def _keras_save(path: Path) -> None:
    """The cifar10 command's own save (``train._save``): real Keras ``model.save(name)``."""
    from workloads.cifar10.train import Placement, _save

    _save(_keras_model(), str(path), Placement(strategy=None, replicas=1, device_names=[],
                                               gpu_count=0))


def _download(path: Path) -> None:
    from workloads.download import fetch_verified

    # Nothing listens there: the refusal must come before any connection.
    fetch_verified("http://127.0.0.1:9/x", path, "0" * 64, timeout=1.0, max_bytes=10)


MODULE_WRITERS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "gpu monitor csv": ("r50.gpu.csv", _monitor),
    "scaling study csv": ("scaling.csv", _scaling_csv),
    "model saved by Keras": ("model.keras", _keras_save),
    "download cache": ("cifar-10-python.tar.gz", _download),
}
MODULE_CASES = [(w, "file", k) for w in MODULE_WRITERS for k in FILE_KINDS] + [
    (w, f"directory {d}", "another user's link") for w in MODULE_WRITERS for d in DEPTHS]


@pytest.mark.parametrize(("writer", "where", "kind"), MODULE_CASES,
                         ids=[f"{w}-{p}-{k}" for w, p, k in MODULE_CASES])
def test_a_module_writer_refuses_what_was_planted(
        tmp_path: Path, writer: str, where: str, kind: str) -> None:
    name, write = MODULE_WRITERS[writer]
    if writer == "scaling study csv":
        pytest.importorskip("tfhost.scaling")
    work = tmp_path / "trusted"
    work.mkdir(mode=0o755)
    outside = Outside(tmp_path / "victim")
    output = work / "out" / "a" / "b"
    if where == "file":
        plant_at_file(kind, output / name, outside)
    else:
        plant_on_the_way(int(where.split()[1]), output, outside, open_parent=False)
    before = outside.snapshot()
    with pytest.raises(WorkloadError) as refused:
        write(output / name)
    line = refused.value.one_line()
    assert "\n" not in line and len(line) <= 200 and line.isprintable()
    assert outside.snapshot() == before
