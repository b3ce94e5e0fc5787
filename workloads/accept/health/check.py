"""One health-check run: the quick readings, judged by the acceptance rules, within a deadline.

Nothing here measures: no benchmark, no framework, no GPU load. What is read, in order:

* the NVIDIA GPUs on the PCI bus (sysfs) against those NVML can open: a GPU that fell off
  the bus, or a driver that is not loaded, is a missing GPU and fails;
* per GPU, NVML's memory health (uncorrectable ECC errors since the driver loaded, pending
  or failed row remaps, pending page retirements: ``verdicts.memory_errors``, the rule the
  ``nvml`` check of ``workloads accept`` uses), its NVLink error counters and its PCIe
  replays (replays per minute since the last run);
* the kernel log since the last run (:mod:`workloads.accept.health.state` keeps the cursor) and
  its XIDs/SXids with NVIDIA's action, and the PCIe AER counters (``errors`` check rules).

NVML is read in a worker thread: a wedged GPU can hang an NVML call for minutes, and the
run must end before slurmd kills it. A call that has not answered by its share of the
deadline is a failure ("NVML did not answer"), and the run goes on without it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from workloads.accept import errors, verdicts
from workloads.accept.health import nvlink5, reasons, signals
from workloads.accept.health.state import OpenFailure, State
from workloads.accept.verdicts import FAIL, PASS, SKIP, Finding
from workloads.hardware import aer, kernel_log, nvml_errors, xid
from workloads.hardware.nvml import GpuWatch, open_nvml, read_facts, sram_threshold_exceeded

CHECK = "health"
SINCE = "since the last run"


@dataclass
class NvmlReading:
    gpus: list[nvml_errors.GpuErrors] = field(default_factory=list)
    memory: list[Finding] = field(default_factory=list)
    opened: bool = False
    error: str | None = None
    serials: dict[int, str] = field(default_factory=dict)  # NVML index -> board serial
    sram_exceeded: dict[int, bool | None] = field(default_factory=dict)  # NVML index -> flag
    signals: list[signals.Signals] = field(default_factory=list)
    nvlink5: dict[int, nvlink5.Counts] = field(default_factory=dict)  # NVML index -> counters


def _read_nvml(nvml: Any, out: NvmlReading) -> None:
    try:
        handle = open_nvml(nvml)
        if handle is None:
            return
        out.opened = True
        try:
            out.gpus = nvml_errors.read_all(handle)
            for gpu in out.gpus:
                serial = _serial(handle, gpu.index)
                out.sram_exceeded[gpu.index] = sram_threshold_exceeded(
                    handle, handle.nvmlDeviceGetHandleByIndex(gpu.index)
                )
                if serial:
                    out.serials[gpu.index] = serial
                facts = read_facts(handle, gpu.index)
                out.memory.append(verdicts.memory_errors(f"GPU {gpu.index}", GpuWatch(facts)))
                out.signals.append(signals.read(handle, gpu.index))
                out.nvlink5[gpu.index] = nvlink5.read(
                    handle, handle.nvmlDeviceGetHandleByIndex(gpu.index), gpu.index,
                    [link.link for link in gpu.nvlinks],
                )
        finally:
            handle.nvmlShutdown()
    except Exception as exc:  # an NVML error mid-way is a finding, not a crash
        out.error = f"{type(exc).__name__}: {exc}"


def _serial(nvml: Any, index: int) -> str | None:
    """The board serial (``nvmlDeviceGetSerial``), for the drain reason; None if NVML has none."""
    try:
        value = nvml.nvmlDeviceGetSerial(nvml.nvmlDeviceGetHandleByIndex(index))
    except Exception:  # NotSupported on some boards, or no such call in an old pynvml
        return None
    text = value.decode() if isinstance(value, bytes) else str(value)
    return text.strip() or None


def read_nvml(nvml: Any, timeout_s: float) -> tuple[NvmlReading, bool]:
    """NVML's readings, or (partial, False) when it did not answer within ``timeout_s``."""
    out = NvmlReading()
    worker = threading.Thread(target=_read_nvml, args=(nvml, out), name="health-nvml", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return out, not worker.is_alive()


def expected_count_finding(expected: int, on_bus: list[str], reading: NvmlReading) -> Finding:
    """The GPUs this node should have (``--expect-gpus``) against those on the bus and in NVML.

    The bus alone cannot tell a GPU that never enumerated (no sysfs entry, nothing for NVML to
    miss): only the count the node is known to have can.
    """
    seen = max(len(on_bus), len(reading.gpus))
    details = {"expected": expected, "pci": len(on_bus), "nvml": len(reading.gpus)}
    if seen < expected:
        return Finding(CHECK, "host", "GPU count", FAIL, f"{seen} of the {expected} GPUs this "
                       f"node should have are present (PCI bus {len(on_bus)}, NVML "
                       f"{len(reading.gpus)}): reboot the node; reseat or replace the missing "
                       "GPU if it stays missing", seen, "GPUs", expected,
                       details={**details, "meaning": f"{seen} of {expected} GPUs present",
                                "action": "reboot; reseat or replace the missing GPU"})
    return Finding(CHECK, "host", "GPU count", PASS, f"{seen} GPUs, as expected", seen, "GPUs",
                   expected, details=details)


def gpu_count_finding(on_bus: list[str], reading: NvmlReading, answered: bool) -> Finding:
    """The GPUs NVML reaches against the NVIDIA GPUs on the PCI bus."""
    details = {"pci": on_bus, "nvml": len(reading.gpus)}
    if not answered:
        return Finding(CHECK, "host", "GPUs", FAIL, "NVML did not answer within the deadline: a "
                       "GPU may have fallen off the bus or the driver is wedged; reboot the node",
                       details=details)
    if reading.error:
        return Finding(CHECK, "host", "GPUs", FAIL, f"NVML failed ({reading.error}): check "
                       "`nvidia-smi`; reset the GPU or reboot", details=details)
    if not on_bus and not reading.gpus:
        return Finding(CHECK, "host", "GPUs", SKIP, "no NVIDIA GPU on the PCI bus", details=details)
    if on_bus and not reading.opened:
        return Finding(CHECK, "host", "GPUs", FAIL, f"{len(on_bus)} NVIDIA GPUs on the PCI bus "
                       "but NVML cannot be opened: the driver is not loaded; run `nvidia-smi`, "
                       "reload the driver or reboot", len(reading.gpus), "GPUs", len(on_bus),
                       details=details)
    if len(reading.gpus) < len(on_bus):
        reached = {g.pci for g in reading.gpus}
        missing = ", ".join(b for b in on_bus if b not in reached) or "?"
        return Finding(CHECK, "host", "GPUs", FAIL, f"NVML reaches {len(reading.gpus)} of the "
                       f"{len(on_bus)} NVIDIA GPUs on the PCI bus (missing: {missing}): reboot "
                       "the node; reseat or replace the GPU if it stays missing",
                       len(reading.gpus), "GPUs", len(on_bus), details=details)
    return Finding(CHECK, "host", "GPUs", PASS, f"{len(reading.gpus)} GPUs, all reachable "
                   "through NVML", len(reading.gpus), "GPUs", len(on_bus) or None, details=details)


@dataclass
class Run:
    findings: list[Finding]
    state: State
    scan: kernel_log.Scan
    seconds: float
    gpus: list[reasons.Gpu] = field(default_factory=list)


def run(
    state: State,
    *,
    kernel_log_path: Path | None,
    sysfs: Path,
    deadline_s: float,
    since_boot: bool = False,
    nvml: Any = None,
    expect_gpus: int | None = None,
) -> Run:
    """Read and judge everything; returns the findings and the state to keep."""
    start = time.monotonic()
    boot = kernel_log.boot_id()
    same_boot = state.boot_id is not None and state.boot_id == boot
    if not same_boot:  # a reboot cleared whatever was open, and the log starts afresh
        state.open, state.after_us, state.replays, state.replays_at = [], None, {}, None
        state.nvlink, state.nvlink5 = {}, {}
    state.boot_id = boot
    after = None if since_boot else state.after_us

    reading, answered = read_nvml(nvml, max(1.0, deadline_s * 0.4))
    on_bus = aer.nvidia_gpus(sysfs)
    left = max(1.0, deadline_s - (time.monotonic() - start) - 5.0)
    scan = kernel_log.scan(kernel_log_path, after_us=after, deadline_s=left)
    counters = {bdf: aer.read_gpu(bdf, sysfs) for bdf in on_bus}
    baseline = dict(state.nvlink)
    judged = [nvlink_since(gpu, baseline.get(gpu.pci or "")) for gpu in reading.gpus]
    readings = errors.Readings(scan, judged, counters, on_bus)

    now = time.time()
    minutes = (now - state.replays_at) / 60 if state.replays_at and same_boot else None
    since = "since boot" if since_boot or after is None else SINCE
    findings = [gpu_count_finding(on_bus, reading, answered), *reading.memory]
    if expect_gpus is not None:
        findings.append(expected_count_finding(expect_gpus, on_bus, reading))
    fabric = signals.has_fabric(reading.signals)
    for signal in reading.signals:
        findings += signals.judge(f"GPU {signal.index}", signal, fabric)
    for gpu in reading.gpus:
        counts = reading.nvlink5.get(gpu.index)
        row = nvlink5.judge(f"GPU {gpu.index}", counts, state.nvlink5.get(gpu.pci or "")) \
            if counts is not None else None
        if row is not None:
            findings.append(row)
    findings += [_nvlink_since_note(_architecture(_xid48_sram(f, reading), reading), baseline,
                                    reading) for f in errors.judge(
        readings,
        replay_minutes=minutes,
        replay_baseline=state.replays if minutes else None,
        since=since,
    )]
    if state.lost:
        findings.append(_lost_state(state, now))
    findings += _still_open(state, findings)
    _remember_first_seen(state, findings, now)

    if scan.readable and scan.last_us is not None and not since_boot:
        state.after_us = max(state.after_us or 0, scan.last_us)
    if answered:
        state.replays = {
            g.pci: g.pcie_replays for g in reading.gpus if g.pci and g.pcie_replays is not None
        }
        state.replays_at = now
        state.nvlink = {
            g.pci: {str(link.link): {k: v for k, v in link.counts.items() if v is not None}
                    for link in g.nvlinks}
            for g in reading.gpus if g.pci
        }
        state.nvlink5 = {
            g.pci: nvlink5.as_state(reading.nvlink5[g.index])
            for g in reading.gpus if g.pci and g.index in reading.nvlink5
        }
    gpus = [reasons.Gpu(g.index, g.pci, reading.serials.get(g.index)) for g in reading.gpus]
    known = {g.pci for g in gpus}
    gpus += [reasons.Gpu(None, bdf, None) for bdf in on_bus if bdf not in known]
    return Run(findings, state, scan, time.monotonic() - start, gpus)


def nvlink_since(
    gpu: nvml_errors.GpuErrors, before: dict[str, dict[str, int]] | None
) -> nvml_errors.GpuErrors:
    """The GPU's NVLink error counts added since ``before`` (the last run's reading).

    A count below the last one means the counters were reset (a GPU reset): all of it is new.
    Without a last reading (the first run of a boot) the totals since the driver loaded stand.
    """
    if before is None:
        return gpu
    links = []
    for link in gpu.nvlinks:
        last = before.get(str(link.link), {})
        counts = {
            key: None if value is None
            else value - last[key] if key in last and value >= last[key] else value
            for key, value in link.counts.items()
        }
        links.append(replace(link, counts=counts))
    return replace(gpu, nvlinks=tuple(links))


def _nvlink_since_note(
    finding: Finding, baseline: dict[str, Any], reading: NvmlReading
) -> Finding:
    """Say over what span an NVLink errors row counted."""
    if finding.item != "NVLink errors" or not finding.device.startswith("GPU "):
        return finding
    index = int(finding.device.split()[1])
    gpu = next((g for g in reading.gpus if g.index == index), None)
    span = SINCE if gpu is not None and gpu.pci in baseline else "since the driver loaded"
    return replace(finding, reason=f"{finding.reason} ({span})",
                   details={**finding.details, "since": span})


def _gpu_at(reading: NvmlReading, pci: str) -> nvml_errors.GpuErrors | None:
    key = errors.device_key(pci)
    return next((g for g in reading.gpus if g.pci and errors.device_key(g.pci) == key), None)


def _architecture(finding: Finding, reading: NvmlReading) -> Finding:
    """An XID on a GPU whose catalogue column says NO is still judged, and says so."""
    code = finding.details.get("code")
    gpu = _gpu_at(reading, str(finding.details.get("pci", "")))
    if finding.details.get("kind") != "XID" or not isinstance(code, int) or gpu is None:
        return finding
    found = xid.load().applies_to(code, gpu.name)
    if found is None:
        return finding
    column, applies = found
    details = {**finding.details, "applies": {"column": column, "yes": applies}}
    if applies:
        return replace(finding, details=details)
    return replace(finding, details=details, reason=f"{finding.reason} (NVIDIA's catalogue "
                   f"does not list XID {code} for {column}-class GPUs: {gpu.name})")


SRAM_SET = "SRAM error threshold exceeded: run field diagnostics (RMA if they fail)"
SRAM_UNKNOWN = "SRAM threshold flag not readable (nvidia-smi -q: sram_threshold_exceeded)"


def _xid48_sram(finding: Finding, reading: NvmlReading) -> Finding:
    """XID 48 with NVML's SRAM threshold flag, as NVIDIA's WORKFLOW_XID_48 asks.

    "All other SRAM: check SRAM Error Threshold flag; if set RUN_FIELDDIAG": the flag set turns
    the action into field diagnostics; not readable, the action says where to look.
    """
    if finding.item != "XID 48" or finding.verdict != FAIL:
        return finding
    gpu = _gpu_at(reading, str(finding.details.get("pci", "")))
    flag = reading.sram_exceeded.get(gpu.index) if gpu is not None else None
    action = str(finding.details.get("action", ""))
    action = SRAM_SET if flag else f"{action}; {SRAM_UNKNOWN}" if flag is None else action
    reason = finding.reason.replace(str(finding.details.get("action", "")), action, 1)
    return replace(finding, reason=reason,
                   details={**finding.details, "action": action, "sram_threshold_exceeded": flag})


LOST_ACTION = ("check the GPUs (nvidia-smi, the kernel log since boot), then run `workloads "
               "health --clear`")


def _lost_state(state: State, now: float) -> Finding:
    """The state could not be read: the failures it held open are unknown, so this fails.

    It stays open (like an XID's) until a reboot or ``--clear``: a node must not go back to
    work because the file that said it was broken could not be read.
    """
    note = state.note or "the state file could not be read"
    state.open.append(OpenFailure("host", "state", note, LOST_ACTION, now,
                                  "state file unreadable: open failures unknown"))
    return Finding(CHECK, "host", "state", FAIL, f"{note}; the failures it held open are "
                   f"unknown: {LOST_ACTION}",
                   details={"meaning": "state file unreadable: open failures unknown",
                            "action": LOST_ACTION})


def _remember_first_seen(state: State, findings: list[Finding], now: float) -> None:
    """Keep when each failure still failing was first found; forget the ones that pass."""
    failing = {f"{f.device}|{f.item}" for f in findings if f.verdict == FAIL}
    opened = {f"{o.device}|{o.item}": o.seen_at for o in state.open}
    state.first_seen = {
        key: state.first_seen.get(key, opened.get(key, now)) for key in sorted(failing)
    }


def first_seen(state: State, finding: Finding) -> float:
    """When ``finding`` first failed (this run's time for a new one)."""
    return state.first_seen.get(f"{finding.device}|{finding.item}", time.time())


def _still_open(state: State, findings: list[Finding]) -> list[Finding]:
    """Fail again for what earlier runs found and nobody has cleared; remember the new ones."""
    events = [f for f in findings if f.verdict == FAIL and f.item.startswith(("XID", "SXid"))]
    known = {(o.device, o.item) for o in state.open}
    now = time.time()
    for finding in events:
        if (finding.device, finding.item) not in known:
            action = str(finding.details.get("action", ""))
            meaning = str(finding.details.get("meaning", ""))
            state.open.append(
                OpenFailure(finding.device, finding.item, finding.reason, action, now, meaning)
            )
    fresh = {(f.device, f.item) for f in findings if f.verdict == FAIL}
    return [
        Finding(CHECK, o.device, o.item, FAIL, f"still open from an earlier run: {o.action}; when "
                "it is done, run `workloads health --clear` (a reboot clears it too)",
                details={"first_reason": o.reason, "seen_at": o.seen_at, "meaning": o.meaning,
                         "action": o.action})
        for o in state.open
        if (o.device, o.item) not in fresh
    ]
