"""The `errors` check gets the kernel log however the battery is run, or says how to give it.

`workloads accept` on a GPU host (an NVIDIA GPU in a sysfs tree built in the kernel's
layout) whose log cannot be read: the kernel-log row fails in one line that names
`--kernel-log FILE`, and the run exits 1. Given a saved healthy log (the driver's own
lines, `kernel_log_fixture`), the same host passes; given an empty file (a save that
failed), it fails rather than reading "no XID" into nothing. The runner's side
(`scripts/tfhost`: the log saved on the host and mounted read-only) and accept.yml's are in
tests/host/test_runner_kernel_log.py and tests/fleet/test_accept_invocation.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.workloads import kernel_log_fixture as klog
from tests.workloads.sysfs_fixture import pci_tree
from workloads.cli import main
from workloads.hardware import aer, kernel_log


@pytest.fixture
def gpu_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One NVIDIA GPU on the PCI bus, no driver to ask (NVML absent): a GPU host."""
    monkeypatch.setattr(aer, "SYSFS_PCI", pci_tree(tmp_path / "sys", {"0000:3b:00.0": {}}))
    return tmp_path


def _accept(tmp: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
    out = tmp / "accept.json"
    code = main(["accept", "--only", "errors", "--output", str(out), *args])
    capsys.readouterr()
    record = json.loads(out.read_text())
    [row] = [f for f in record["findings"] if f["item"] == "kernel log"]
    return code, row


def test_without_access_the_row_fails_in_one_line_naming_the_option(
        gpu_host: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    denied = gpu_host / "denied"
    denied.write_text("#!/bin/sh\necho 'dmesg: read kernel buffer failed: Operation not "
                      "permitted' >&2\nexit 1\n")
    denied.chmod(0o755)
    monkeypatch.setattr(kernel_log, "JOURNAL", ("false",))
    monkeypatch.setattr(kernel_log, "DMESG", (str(denied),))
    code, row = _accept(gpu_host, capsys)
    assert code == 1
    assert row["verdict"] == "fail" and "\n" not in row["reason"]
    assert "Operation not permitted" in row["reason"]
    assert "pass --kernel-log FILE" in row["reason"]


def test_a_saved_healthy_log_passes(gpu_host: Path, capsys: pytest.CaptureFixture[str],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_log, "JOURNAL", ("false",))  # the host's own: never read
    monkeypatch.setattr(kernel_log, "DMESG", ("false",))
    saved = klog.write(gpu_host / "kernel.log", klog.noise(1.0, 200))
    code, row = _accept(gpu_host, capsys, "--kernel-log", str(saved))
    assert (code, row["verdict"]) == (0, "pass"), row
    assert row["details"]["source"] == str(saved) and row["details"]["lines"] == 200


def test_an_empty_saved_log_fails(gpu_host: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = gpu_host / "kernel.log"
    empty.write_text("")
    code, row = _accept(gpu_host, capsys, "--kernel-log", str(empty))
    assert code == 1 and row["verdict"] == "fail", row
    assert "is empty, not a saved kernel log" in row["reason"]


def test_save_writes_the_first_source_that_prints_lines(tmp_path: Path) -> None:
    source = klog.write(tmp_path / "journal.txt", klog.noise(1.0, 50))
    target = tmp_path / "kernel.log"
    assert kernel_log.save_copy(target, commands=(("false",), ("cat", str(source)))) is None
    assert target.read_text() == source.read_text()
    assert target.stat().st_mode & 0o777 == 0o644  # the container's user reads it


def test_save_says_why_and_leaves_nothing_when_no_source_prints(tmp_path: Path) -> None:
    target = tmp_path / "kernel.log"
    why = kernel_log.save_copy(target, commands=(("false",), ("true",)))
    assert why == "`false` failed: exit 1; `true` printed nothing"
    assert not target.exists()
