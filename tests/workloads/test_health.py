"""``workloads health`` on this machine: the cursor, the open failures, the GPU count, bad input.

The kernel log is a file in the driver's real formats, read through the production reader;
NVML is the recorded-readings stand-in (pynvml's names and counter constants); the PCI bus
is a sysfs tree in the kernel's layout. The SLURM side runs for real in
``tests/slurm/test_health_drain.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workloads import kernel_log_fixture as klog
from tests.workloads.conftest import REPO
from tests.workloads.sysfs_fixture import pci_tree
from tests.workloads.test_accept_errors import GPU0, GPU1, AtBus, readings_file, zero_links
from workloads.accept.health import command, slurm
from workloads.accept.health import state as health_state
from workloads.cli import build_parser, main
from workloads.hardware import kernel_log


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A two-GPU node: its bus, its kernel log, its state file, this boot's identity."""
    boot = tmp_path / "boot_id"
    boot.write_text("6f1d2c1e-0000-4000-8000-000000000001\n")
    monkeypatch.setattr(kernel_log, "BOOT_ID", boot)
    return {
        "sysfs": pci_tree(tmp_path / "sys", {GPU0: {}, GPU1: {}}),
        "log": klog.write(tmp_path / "kern.log", klog.noise(1.0, 20)),
        "state": tmp_path / "state" / "health-state.json",
        "boot": boot,
        "tmp": tmp_path,
    }


def gpus(tmp: Path, **extra: dict[str, Any]) -> AtBus:
    return AtBus(readings_file(tmp, [
        {"bus_id": "00000000:3B:00.0", "nvlink_errors": zero_links(), "pcie_replays": 0,
         "remapped_rows": [0, 0, 0, 0], **extra.get("gpu0", {})},
        {"bus_id": "00000000:86:00.0", "nvlink_errors": zero_links(), "pcie_replays": 0,
         "remapped_rows": [0, 0, 0, 0], **extra.get("gpu1", {})},
    ]))


def health(node: dict[str, Path], nvml: Any, *args: str) -> tuple[int, dict[str, Any]]:
    parsed = build_parser().parse_args([
        "health", "--json", "--kernel-log", str(node["log"]), "--sysfs-pci", str(node["sysfs"]),
        "--state", str(node["state"]), *args,
    ])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = command.run(parsed, nvml=nvml)
    return code, json.loads(out.getvalue())


def rows(record: dict[str, Any], item: str) -> list[dict[str, Any]]:
    return [f for f in record["findings"] if f["item"] == item]


def append(node: dict[str, Path], *lines: str) -> None:
    with node["log"].open("a") as log:
        log.write("\n".join(lines) + "\n")


def test_an_xid_is_reported_once_and_its_failure_stays_open_until_cleared(
    node: dict[str, Path],
) -> None:
    append(node, klog.xid_line(300.5, "0000:3b:00", 79))
    code, first = health(node, gpus(node["tmp"]))
    assert code == 1 and first["verdict"] == "fail"
    [xid79] = rows(first, "XID 79")
    assert xid79["device"] == "GPU 0" and xid79["details"]["action"] == "reboot the node"
    assert "since boot" in xid79["reason"]  # the first run has no cursor yet
    saved = json.loads(node["state"].read_text())
    assert saved["after_us"] == 300_500_000 and saved["open"][0]["item"] == "XID 79"
    assert os.stat(node["state"]).st_mode & 0o777 == 0o600

    code, second = health(node, gpus(node["tmp"]))
    [open79] = rows(second, "XID 79")
    assert code == 1 and "still open from an earlier run: reboot the node" in open79["reason"]
    assert rows(second, "kernel log")[0]["reason"].endswith("no XID or SXid since the last run")

    code, cleared = health(node, gpus(node["tmp"]), "--clear")
    assert code == 0 and cleared["verdict"] == "pass" and cleared["cleared"][0]["item"] == "XID 79"

    # An application's fault after that: reported by the next run, and by that run only.
    append(node, klog.xid_line(400.0, "0000:86:00", 13, "Graphics SM Warp Exception on (GPC 7)"))
    code, fresh = health(node, gpus(node["tmp"]))
    [xid13] = rows(fresh, "XID 13")
    assert code == 0 and xid13["verdict"] == "warn" and xid13["device"] == "GPU 1"
    assert "since the last run" in xid13["reason"]
    code, after = health(node, gpus(node["tmp"]))
    assert code == 0 and not rows(after, "XID 13")
    assert json.loads(node["state"].read_text())["runs"] == 5


def test_a_reboot_clears_open_failures_and_starts_the_log_afresh(node: dict[str, Path]) -> None:
    append(node, klog.xid_line(300.5, "0000:3b:00", 48))
    assert health(node, gpus(node["tmp"]))[0] == 1
    node["boot"].write_text("6f1d2c1e-0000-4000-8000-000000000002\n")
    klog.write(node["log"], klog.noise(1.0, 5))  # the new boot's log
    code, record = health(node, gpus(node["tmp"]))
    assert code == 0 and not rows(record, "XID 48")
    assert json.loads(node["state"].read_text())["boot_id"].endswith("0002")


def test_a_drain_reason_names_the_gpu_and_stays_the_same_while_the_fault_is_open(
    node: dict[str, Path],
) -> None:
    """Index, bus id and serial from NVML; the first run's time; the same text run after run."""
    from workloads.accept.health import check

    nvml = gpus(node["tmp"], gpu0={"serial": "1654922006536"}, gpu1={"serial": "1654922006537"})
    append(node, klog.xid_line(900.5, GPU1[:-2], 79))

    def reasons_now() -> list[str]:
        kept = health_state.load(node["state"]) if node["state"].exists() else health_state.State()
        done = check.run(kept, kernel_log_path=node["log"], sysfs=node["sysfs"], deadline_s=20,
                         nvml=nvml)
        node["state"].parent.mkdir(exist_ok=True)
        health_state.save(node["state"], done.state)
        return command._reasons(done)

    first = reasons_now()
    assert len(first) == 1
    assert re.fullmatch(r"workloads-health: XID 79 GPU has fallen off the bus; gpu 1 "
                        r"0000:86:00.0 sn 1654922006537; reboot the node; since "
                        r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", first[0]), first[0]
    for _ in range(3):  # later runs: the XID is not read again, its failure stays open
        assert reasons_now() == first


NETIR_FATAL = "NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000)"
RLW_FATAL = "RLW_REMAP Fatal XC1 i0 Link 12 (0x040988e2 0x00000008 0x00000000 0x00000000)"
NETIR_NONFATAL = "NETIR Non-fatal XC0 i0 Link 3 (0x000fe406 0x00000000 0x00000000 0x00000000)"


@pytest.mark.parametrize(
    ("code", "text", "verdict"),
    [(149, NETIR_FATAL, "fail"), (145, RLW_FATAL, "fail"), (167, None, "fail"),
     (149, NETIR_NONFATAL, "warn")],
)
def test_blackwell_link_xids_fail_when_fatal_and_only_then(
    node: dict[str, Path], code: int, text: str | None, verdict: str
) -> None:
    append(node, klog.xid_line(700.25, GPU0[:-2], code, text))
    status, record = health(node, gpus(node["tmp"]))
    [row] = rows(record, f"XID {code}")
    assert row["verdict"] == verdict and status == (1 if verdict == "fail" else 0)
    if verdict == "fail":
        assert row["details"]["action"].startswith("reset the GPU")


def test_an_xid_nvidia_does_not_list_for_this_gpu_says_so(node: dict[str, Path]) -> None:
    """The stand-in's GPUs are H100s: NVIDIA lists XID 149 for B100/GB200 only, 74 for H100."""
    append(node, klog.xid_line(720.5, GPU0[:-2], 149, NETIR_FATAL),
           klog.xid_line(720.6, GPU1[:-2], 74, "NVLink: fatal error detected on link 3"))
    _, record = health(node, gpus(node["tmp"]))
    [xid149] = rows(record, "XID 149")
    [xid74] = rows(record, "XID 74")
    assert xid149["details"]["applies"] == {"column": "H100", "yes": False}
    assert "does not list XID 149 for H100-class GPUs" in xid149["reason"]
    assert xid149["verdict"] == "fail"  # still judged: the catalogue's column is not a filter
    assert xid74["details"]["applies"] == {"column": "H100", "yes": True}
    assert "does not list" not in xid74["reason"]


@pytest.mark.parametrize(
    ("flag", "action"),
    [(True, "SRAM error threshold exceeded: run field diagnostics (RMA if they fail)"),
     (False, "drain and reset the GPU; run field diagnostics (RMA if they fail)"),
     (None, "drain and reset the GPU; run field diagnostics (RMA if they fail); SRAM threshold "
      "flag not readable (nvidia-smi -q: sram_threshold_exceeded)")],
)
def test_xid_48_reads_the_sram_threshold_flag(
    node: dict[str, Path], flag: bool | None, action: str
) -> None:
    """NVIDIA's WORKFLOW_XID_48: for SRAM, the threshold flag set means field diagnostics."""
    append(node, klog.xid_line(800.5, GPU1[:-2], 48))
    status, record = health(node, gpus(node["tmp"], gpu1={"sram_threshold_exceeded": flag}))
    [row] = rows(record, "XID 48")
    assert status == 1 and row["verdict"] == "fail"
    assert row["details"]["action"] == action and action in row["reason"]
    assert row["details"]["sram_threshold_exceeded"] is flag


def test_since_boot_judges_everything_and_keeps_the_state(node: dict[str, Path]) -> None:
    append(node, klog.xid_line(300.5, "0000:86:00", 13, "x"))
    health(node, gpus(node["tmp"]))
    before = node["state"].read_text()
    _, record = health(node, gpus(node["tmp"]), "--since-boot")
    assert rows(record, "XID 13")[0]["verdict"] == "warn"
    assert node["state"].read_text() == before


def test_a_gpu_the_bus_has_and_nvml_does_not_fails(node: dict[str, Path]) -> None:
    one = AtBus(readings_file(node["tmp"], [{"bus_id": "00000000:3B:00.0"}]))
    code, record = health(node, one)
    [count] = rows(record, "GPUs")
    assert code == 1 and count["verdict"] == "fail"
    assert "NVML reaches 1 of the 2 NVIDIA GPUs on the PCI bus (missing: 0000:86:00.0)" in (
        count["reason"]
    )


class NoDriver:
    """NVML without its kernel module: nvmlInit raises, as pynvml's does."""

    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


class Wedged:
    """NVML whose first call never returns (a GPU that fell off the bus can do this)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def nvmlInit(self) -> None:
        self.release.wait()


@pytest.fixture
def wedged() -> Iterator[Wedged]:
    nvml = Wedged()
    yield nvml
    nvml.release.set()


def test_no_driver_and_a_wedged_driver_fail_within_the_deadline(
    node: dict[str, Path], wedged: Wedged
) -> None:
    code, record = health(node, NoDriver())
    assert code == 1
    [count] = rows(record, "GPUs")
    assert "2 NVIDIA GPUs on the PCI bus but NVML cannot be opened" in count["reason"]
    code, record = health(node, wedged, "--deadline", "4")
    assert code == 1 and record["seconds"] < 4
    assert "NVML did not answer within the deadline" in rows(record, "GPUs")[0]["reason"]


def test_a_pending_row_remap_fails(node: dict[str, Path]) -> None:
    code, record = health(node, gpus(node["tmp"], gpu1={"remapped_rows": [0, 2, 1, 0]}))
    memory = {r["device"]: r for r in rows(record, "memory errors")}
    assert code == 1 and memory["GPU 1"]["verdict"] == "fail"
    assert memory["GPU 0"]["verdict"] == "pass"
    assert "row remap is pending" in memory["GPU 1"]["reason"]


def test_pcie_replays_are_rated_between_runs(node: dict[str, Path]) -> None:
    health(node, gpus(node["tmp"], gpu0={"pcie_replays": 100}))
    saved = json.loads(node["state"].read_text())
    assert saved["replays"] == {GPU0: 100, GPU1: 0}
    saved["replays_at"] -= 60.0  # the last run was a minute ago
    node["state"].write_text(json.dumps(saved))
    _, record = health(node, gpus(node["tmp"], gpu0={"pcie_replays": 1100}))
    replays = {r["device"]: r for r in rows(record, "PCIe replays")}
    assert replays["GPU 0"]["verdict"] == "warn"
    assert replays["GPU 0"]["value"] == pytest.approx(1000, rel=0.05)
    assert "per minute since the last run" in replays["GPU 0"]["reason"]
    assert replays["GPU 1"]["verdict"] == "pass"


@pytest.mark.parametrize("garbage", ["{not json", '{"version": 1, "open": [{"device": 3}]}',
                                     "\x00" * 64, '{"version": 99}', "[]"])
def test_an_unreadable_state_fails_until_cleared(node: dict[str, Path], garbage: str) -> None:
    """The failures an unreadable state held open are unknown: the node must not pass."""
    node["state"].parent.mkdir()
    node["state"].write_text(garbage)
    code, record = health(node, gpus(node["tmp"]))
    assert code == 1 and "could not be read" in record["note"]
    assert (node["state"].parent / "health-state.json.unreadable").exists()
    [lost] = rows(record, "state")
    assert lost["verdict"] == "fail" and "held open are unknown" in lost["reason"]
    code, record = health(node, gpus(node["tmp"]))  # the next run: still failing
    assert code == 1 and "still open" in rows(record, "state")[0]["reason"]
    code, record = health(node, gpus(node["tmp"]), "--clear")
    assert code == 0 and record["cleared"][0]["item"] == "state"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``workloads health ARGS`` through the CLI's own entry point, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["health", *args])
        except SystemExit as exit_:  # argparse's errors and --help
            code = int(exit_.code or 0)
    return subprocess.CompletedProcess(["workloads", "health", *args], code, out.getvalue(),
                                       err.getvalue())


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--kernel-log", "/nonexistent/kern.log"], "workloads health: error: --kernel-log "
         "/nonexistent/kern.log: no such file; give a saved kernel log, or leave the option out "
         "to read this boot's journal"),
        (["--deadline", "0"], "workloads health: error: argument --deadline: must be > 0, got 0; "
         "see 'workloads health --help'"),
        (["--deadline", "900"], "workloads health: error: argument --deadline: must be at most "
         "600 s, got 900; see 'workloads health --help'"),
        (["--sysfs-pci", "/etc/hostname"], "workloads health: error: --sysfs-pci /etc/hostname: "
         "not a directory; give a directory of PCI devices (like /sys/bus/pci/devices), or leave "
         "it out"),
        (["--slurm", "--node", "gpu01;reboot"], "workloads health: error: node name "
         "'gpu01;reboot' is not a SLURM node name; give --node NAME (letters, digits, '.', '_', "
         "'-')"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], line: str, tmp_path: Path) -> None:
    done = _cli("--state", str(tmp_path / "s.json"), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == line
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize(
    ("state", "line"),
    [
        ("/proc/1/nope/health.json", "cannot keep the state file /proc/1/nope/health.json: No "
         "such file or directory; run as root (the health check is root's), or give --state "
         "FILE in a directory of yours"),
        ("/etc/hostname/health.json", "/etc/hostname is not a directory; give a directory"),
    ],
)
def test_a_state_file_that_cannot_be_kept_is_one_line(
    state: str, line: str, tmp_path: Path
) -> None:
    log = klog.write(tmp_path / "kern.log", klog.noise(1.0, 3))
    done = _cli("--state", state, "--kernel-log", str(log))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"workloads health: error: {line}"


def test_slurm_mode_without_scontrol_is_one_line(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # The real lookup on a PATH without scontrol, in the slurm module's view only: the
    # process's PATH is every thread's (the background jobs' children read it).
    where = str(Path(sys.executable).parent)
    monkeypatch.setattr(slurm, "shutil", SimpleNamespace(
        which=lambda name: shutil.which(name, path=where)))
    done = _cli("--slurm", "--node", "gpu01", "--state", str(tmp_path / "s.json"))
    assert done.returncode == 2 and done.stderr.strip() == (
        "workloads health: error: --slurm needs scontrol, and it is not on PATH; install "
        "SLURM's client commands on the node, or run without --slurm"
    )


def test_a_state_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    log = klog.write(tmp_path / "kern.log", klog.noise(1.0, 3))
    done = _cli("--state", str(shared / "s.json"), "--kernel-log", str(log))
    assert done.returncode == 2 and "is writable by others" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (shared / "s.json").exists()


def test_help_reads_like_documentation() -> None:
    done = subprocess.run(  # the installed console script, as an operator runs it
        [str(Path(sys.executable).parent / "workloads"), "health", "--help"], cwd=REPO,
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0
    for words in ("HealthCheckProgram=", "XID and SXid events since the last run",
                  "--clear", "Exit 0 when nothing fails", "warn at 5: Imbue"):
        assert words in done.stdout


SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;()/#+_-")
WORDY = st.text(st.characters(codec="utf-8"), max_size=300) | st.lists(
    st.sampled_from(["GPU", "has", "fallen", "off", "the", "bus", "reset", "(nvidia-smi", "-r)",
                     "reboot", "NETIR", "Fatal", "XC0", "i0", "Link", "-1", "0x000fe406"]),
    max_size=60).map(" ".join)


@settings(max_examples=300)
@given(
    code=st.sampled_from(["XID 79", "XID 149", "SXid 12028", "GPUs", "state", "memory"]),
    meaning=WORDY,
    where=st.sampled_from(["host", "gpu 7 0000:3b:00.0 sn 1654922006536",
                           "gpu - 0000:86:00 sn -", "nvswitch 3 0000:c1:00.0"]),
    action=WORDY,
    since=st.floats(0, 4102444800),
    more=st.integers(0, 200),
)
def test_a_drain_reason_keeps_its_fields_and_whole_words(
    code: str, meaning: str, where: str, action: str, since: float, more: int
) -> None:
    """Whatever a finding says: safe for scontrol, within the limit, no word cut, every field."""
    why = slurm.reason(slurm.Cause(f"{code} {meaning}", where, action, since), more)
    assert why.startswith(slurm.PREFIX + " " + code) and len(why) <= slurm.MAX_REASON
    assert set(why) <= SAFE
    fault, place, todo, when, *rest = why.removeprefix(slurm.PREFIX + " ").split("; ")
    assert place == where and when == f"since {slurm.stamp(since)}"
    assert rest == ([f"+{more} more"] if more else [])
    for field_text, given_text in ((fault, f"{code} {meaning}"), (todo, action)):
        if not slurm._clean(given_text):  # nothing to say: the field says so, never empty
            assert field_text == "see workloads health", (field_text, given_text)
            continue
        clean = slurm._clean(given_text).split(" ")
        words = field_text.removesuffix("...").split(" ") if field_text else []
        assert words == clean[: len(words)], (field_text, given_text)  # whole words, in order


def test_the_state_lock_makes_a_second_run_wait(node: dict[str, Path]) -> None:
    busy = pytest.raises(health_state.safefs.UnsafePath, match="in use by another health check")
    with health_state.locked(node["state"], 1.0), busy, health_state.locked(node["state"], 0.2):
        pass
