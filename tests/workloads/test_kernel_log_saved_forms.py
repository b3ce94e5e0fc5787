"""`--kernel-log PATH` given something that is not a saved log: one failing row, never a pass
or a hang.

The operator's next mistakes after an empty file: the journal's own binary file
(`/var/log/journal/<machine>/system.journal`, which starts "LPKSHHRH" and is mostly
binary), another binary file, a directory, a FIFO nobody writes to (a `mkfifo` left
behind). None is this boot's kernel log: the row fails naming the path and the fix, and
the scan ends within its deadline. Nor is a log whose lines are later than this boot is old
(saved on another boot). A pipe that does carry a log (`journalctl -k -b |
workloads accept --kernel-log /dev/stdin`) is read as a file is. The binaries are a
fixed-seed corpus, each with a NUL somewhere in its first 64 KiB.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.workloads import kernel_log_fixture as klog
from tests.workloads.sysfs_fixture import pci_tree
from workloads.hardware import kernel_log

# systemd's journal file header: the signature "LPKSHHRH", then binary fields.
JOURNAL_HEADER = b"LPKSHHRH" + bytes(8) + bytes(range(256)) * 4


def _binaries() -> list[bytes]:
    rng = random.Random(47)
    out = [JOURNAL_HEADER]
    for _ in range(12):
        text = "\n".join(klog.noise(1.0, rng.randrange(0, 50))).encode()
        blob = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4096)))
        at = rng.randrange(len(text) + 1)
        out.append(text[:at] + blob + b"\0" + text[at:])
    return out


@pytest.mark.parametrize("data", _binaries(), ids=lambda d: f"{len(d)}B")
def test_a_binary_file_is_no_kernel_log(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "system.journal"
    path.write_bytes(data)
    scan = kernel_log.scan(path)
    assert not scan.readable and "not text" in str(scan.error) and str(path) in str(scan.error)


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    scan = kernel_log.scan(tmp_path)
    assert not scan.readable and "is a directory" in str(scan.error)


def test_a_fifo_nobody_writes_to_ends_within_the_deadline(tmp_path: Path) -> None:
    """In a child process with a wall-clock bound, so a hang fails the test, not the suite."""
    fifo = tmp_path / "kernel.log"
    os.mkfifo(fifo)
    code = ("import sys; from pathlib import Path; from workloads.hardware import kernel_log; "
            f"s = kernel_log.scan(Path({str(fifo)!r}), deadline_s=1.0); "
            "print(s.error); sys.exit(0 if not s.readable else 3)")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60, cwd=Path(__file__).resolve().parents[2])
    except subprocess.TimeoutExpired:
        pytest.fail("the scan of a FIFO nobody writes to did not end")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not a saved kernel log" in done.stdout


def test_a_pipe_that_carries_a_log_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "kernel.log"
    os.mkfifo(fifo)
    lines = [*klog.noise(1.0, 300), klog.xid_line(5.0, "0000:3b:00", 79)]

    def writer() -> None:
        with fifo.open("w") as out:
            out.write("\n".join(lines) + "\n")

    thread = threading.Thread(target=writer)
    thread.start()
    scan = kernel_log.scan(fifo, deadline_s=30.0)
    thread.join()
    assert scan.readable and scan.complete and scan.lines == len(lines)
    assert [g.first.code for g in scan.groups] == [79]


@pytest.mark.parametrize("ends_at", [5_000.0, 86_400.0 * 30, 1e7])
def test_another_boots_log_is_refused(tmp_path: Path, ends_at: float) -> None:
    """Lines later than this boot's age: a log of another boot (`journalctl -k -b -1`)."""
    path = klog.write(tmp_path / "old.log", klog.noise(ends_at - 1.0, 50))
    scan = kernel_log.scan(path, uptime_s=ends_at / 2)
    assert not scan.readable and "another boot's log" in str(scan.error)
    assert kernel_log.scan(path, uptime_s=ends_at + 10).readable  # this boot's, if as old


def test_the_battery_refuses_a_log_from_before_this_boot(tmp_path: Path) -> None:
    """Through `errors.collect`, as the battery calls it, against this machine's uptime."""
    from workloads.accept import errors

    minutes = errors.uptime_minutes()
    assert minutes is not None
    path = klog.write(tmp_path / "old.log", klog.noise(minutes * 60 + 86_400.0, 20))
    sysfs = pci_tree(tmp_path / "sys", {"0000:3b:00.0": {}})  # a GPU host: the row counts
    [row] = [f for f in errors.collect(None, kernel_log_path=path, sysfs=sysfs)
             if f.item == "kernel log"]
    assert "another boot's log" in row.reason and row.verdict == "fail", row
