"""The ``errors`` check: XIDs and SXids in the kernel log, link error counters, PCIe AER.

Faults show here long before a benchmark slows: in Llama 3's 54-day run most unexpected
interruptions were GPU faults, and those are XIDs in the kernel log and link errors in the
counters first. Each finding carries NVIDIA's meaning and recommended action.

Readers live in :mod:`workloads.hardware` (``kernel_log``, ``xid`` with NVIDIA's catalogue,
``nvml_errors``, ``aer``); the rules here are pure functions of what they read, and
:func:`collect` joins the two for ``workloads accept`` and ``workloads health``.

Limits, each from published practice (:data:`LIMITS` cites them):

* XIDs/SXids: NVIDIA's own immediate action per code (``xid.yaml``): a reboot, a GPU reset,
  draining, a VM restart, a mechanical check or support (RMA) fail; an application restart
  warns; "no action" is info. SXids: Fatal fails, Non-fatal is informational (Fabric
  Manager User Guide).
* NVLink replay, recovery and CRC counters: warn at 5 errors on a GPU's links (Imbue's
  cluster-health ``MIN_NVLINK_ERRORS_TO_WARN``, "these errors don't seem to impact
  training"); fewer are named in the row, since Meta's GCM tolerates 0 by default and
  DCGM's health watch flags any new replay or recovery error.
* PCIe replays: warn above 8 per minute, "the maximum recommended by RM" (DCGM's
  ``DCGM_LIMIT_MAX_PCIREPLAY_RATE``). One reading has no rate: the counter runs from the
  driver's load, at or after boot, so count / minutes since boot is a lower bound of it;
  ``workloads health`` measures it between runs.
* PCIe AER: as the kernel classes them: a fatal error fails (the link was unreliable), a
  non-fatal one warns (a transaction was lost), correctable ones are counted (corrected by
  the hardware).

A GPU host whose kernel log cannot be read fails the kernel-log row: the XIDs are unknown,
and unknown is not healthy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.accept.verdicts import FAIL, INFO, PASS, SKIP, WARN, Finding
from workloads.hardware import aer as aer_reader
from workloads.hardware import kernel_log, nvml_errors, xid
from workloads.hardware.kernel_log import Group, Scan

CHECK = "errors"


@dataclass(frozen=True)
class Limit:
    """A threshold and where it comes from."""

    value: float
    source: str
    where: str


LIMITS = {
    "nvlink_errors": Limit(
        5,
        "Imbue cluster-health, health_checks.py MIN_NVLINK_ERRORS_TO_WARN = 5 (warning, not "
        "failure); Meta GCM check-dcgmi nvlink tolerates 0 by default; DCGM health watch "
        "flags any new replay or recovery error",
        "https://github.com/imbue-ai/cluster-health",
    ),
    "pcie_replays_per_minute": Limit(
        8,
        "DCGM DcgmGPUHardwareLimits.h DCGM_LIMIT_MAX_PCIREPLAY_RATE: 8 replays per minute is "
        "the maximum recommended by RM",
        "https://github.com/NVIDIA/DCGM/blob/master/common/DcgmGPUHardwareLimits.h",
    ),
    "aer": Limit(
        0,
        "Linux Documentation/PCI/pcieaer-howto.rst and ABI sysfs-bus-pci-devices-aer_stats: "
        "correctable errors are recovered by the hardware, non-fatal ones lose a transaction, "
        "fatal ones make the link unreliable",
        "https://docs.kernel.org/PCI/pcieaer-howto.html",
    ),
}


def device_key(pci: str) -> str:
    """``domain:bus:device`` of a bus address, as the XID lines print it (no function)."""
    parts = pci.lower().split(":")
    if len(parts) < 3:
        return pci.lower()
    try:
        domain = f"{int(parts[0], 16):04x}"
    except ValueError:
        domain = parts[0]
    return f"{domain}:{parts[1]}:{parts[2].split('.')[0]}"


def _seconds(us: int | None) -> str:
    return "time unknown" if us is None else f"{us / 1e6:,.1f} s after boot"


# --- the kernel log ------------------------------------------------------------------------

# How to give the check the log, least privilege first: a saved copy of this boot's log
# grants the battery nothing (a container gets one read-only file, no capability, no
# device); `workloads run IMAGE -- accept` and accept.yml do exactly this. CAP_SYSLOG is
# not offered: Docker gives added capabilities to a container's root only (the image's user
# gets none), and it would also let the container clear the ring buffer.
KERNEL_LOG_FIX = ("save it on the host (journalctl -k -b > FILE, as root or a member of adm "
                  "or systemd-journal) and pass --kernel-log FILE (in a container: mount FILE "
                  "read-only and pass its path there; `workloads run IMAGE -- accept` and "
                  "accept.yml do this)")


def kernel_log_finding(scan: Scan, gpus_present: bool, since: str = "since boot") -> Finding:
    """The row that says what was read: a GPU host whose log cannot be read fails."""
    details: dict[str, Any] = {
        "source": scan.source,
        "lines": scan.lines,
        "complete": scan.complete,
        "events": sum(g.count for g in scan.groups) + scan.overflow,
        "last_timestamp_us": scan.last_us,
    }
    if not scan.readable:
        if not gpus_present:
            return Finding(CHECK, "host", "kernel log", SKIP, f"no NVIDIA GPU, and the kernel log "
                           f"is not readable here ({scan.error})", details=details)
        return Finding(
            CHECK,
            "host",
            "kernel log",
            FAIL,
            f"kernel log not readable ({scan.error}): XIDs cannot be checked; {KERNEL_LOG_FIX}",
            details={**details, "error": scan.error},
        )
    read = f"{scan.lines:,} lines of `{scan.source}`"
    if not scan.complete:
        return Finding(
            CHECK,
            "host",
            "kernel log",
            WARN,
            f"{read} read before the size or time bound stopped it: later XIDs are unknown",
            details=details,
        )
    events = details["events"]
    if events:
        return Finding(CHECK, "host", "kernel log", INFO, f"{read} {since}: {events} XID/SXid "
                       "events (rows below)", details=details)
    return Finding(CHECK, "host", "kernel log", PASS, f"{read}: no XID or SXid {since}",
                   details=details)


def event_findings(
    groups: Iterable[Group],
    catalogue: xid.Catalogue,
    labels: dict[str, str],
    since: str = "since boot",
) -> list[Finding]:
    """One row per code per device, with NVIDIA's meaning and action, worst first."""
    groups = list(groups)
    codes_by_device: dict[str, set[int]] = defaultdict(set)
    for group in groups:
        if group.first.kind == "XID":
            codes_by_device[group.first.pci].add(group.first.code)
    rows = []
    for group in groups:
        event = group.first
        guidance = catalogue.guidance(event, frozenset(codes_by_device[event.pci]))
        if event.kind == "XID":
            entry = catalogue.xids.get(event.code)
            what = f"{entry.description} ({entry.mnemonic})" if entry else "unknown code"
            meaning = entry.description if entry else "not in the catalogue"
            if event.fatal is not None:  # NVLink5 (144-150): the message's own severity
                meaning += ", Fatal" if event.fatal else ", Non-fatal"
            device = labels.get(device_key(event.pci), f"PCI {event.pci}")
            bucket = entry.immediate if entry else None
            source = "xid-catalog"
        else:
            entry = None
            meaning = f"{'Fatal' if event.fatal else 'Non-fatal'}, {event.text}"
            what = f"({meaning})"
            device = f"NVSwitch {event.switch} ({event.pci})"
            bucket = None
            source = "fabric-manager-guide"
        nvidia = f"NVIDIA: {bucket}, {guidance.nvidia}" if bucket else f"NVIDIA: {guidance.nvidia}"
        reason = (
            f"{event.kind} {event.code} {what}, {group.count}× {since}, last "
            f"{_seconds(group.last_us)}: {guidance.action} ({nvidia})"
        )
        rows.append(
            Finding(
                CHECK,
                device,
                f"{event.kind} {event.code}",
                guidance.verdict,
                reason,
                value=group.count,
                unit="events",
                limit_source=catalogue.cite(source),
                details={
                    "code": event.code,
                    "kind": event.kind,
                    "meaning": meaning,
                    "pci": event.pci,
                    "count": group.count,
                    "last_timestamp_us": group.last_us,
                    "message": event.text,
                    "action": guidance.action,
                    "nvidia_immediate": bucket,
                    "nvidia_investigatory": entry.investigatory if entry else None,
                    "nvidia_guidance": guidance.nvidia,
                },
            )
        )
    order = {FAIL: 0, WARN: 1, INFO: 2, PASS: 3, SKIP: 4}
    return sorted(rows, key=lambda f: (order.get(f.verdict, 5), f.device, f.item))


# --- NVML counters ------------------------------------------------------------------------


def nvlink_finding(label: str, gpu: nvml_errors.GpuErrors) -> Finding | None:
    """NVLink replay/recovery/CRC counts over the GPU's active links; None without NVLink."""
    if not gpu.nvlinks:
        return None
    limit = LIMITS["nvlink_errors"]
    total = sum(link.total() for link in gpu.nvlinks)
    per_link = {
        link.link: {k: v for k, v in link.counts.items() if v}
        for link in gpu.nvlinks
        if link.total()
    }
    supported = any(v is not None for link in gpu.nvlinks for v in link.counts.values())
    details = {"per_link": per_link, "links": len(gpu.nvlinks), "total": total}
    if not supported:
        return Finding(CHECK, label, "NVLink errors", SKIP,
                       "NVML gives no NVLink error counters on this GPU", details=details)
    named = "; ".join(
        f"link {n}: " + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items())
        for n, counts in sorted(per_link.items())
    )
    if total >= limit.value:
        return Finding(
            CHECK,
            label,
            "NVLink errors",
            WARN,
            f"{total} NVLink errors on {len(per_link)} of {len(gpu.nvlinks)} active links "
            f"({named}), at or above the warn line of {limit.value:.0f}: watch the all-reduce "
            "rows and dmesg; if the counts keep rising, reset the GPU (clears the counters) "
            "and reseat the GPU or NVLink bridge, then escalate",
            total,
            "errors",
            limit.value,
            limit.source,
            details,
        )
    note = f" ({named}; below the warn line of {limit.value:.0f})" if total else ""
    return Finding(CHECK, label, "NVLink errors", PASS,
                   f"{total} errors on {len(gpu.nvlinks)} active links{note}", total, "errors",
                   limit.value, limit.source, details)


def pcie_replay_finding(label: str, replays: int | None, minutes: float | None,
                        over: str = "since boot") -> Finding:
    """The PCIe replay counter as a rate against DCGM's 8 per minute."""
    limit = LIMITS["pcie_replays_per_minute"]
    if replays is None:
        return Finding(CHECK, label, "PCIe replays", SKIP, "NVML gives no PCIe replay counter here")
    details = {"replays": replays, "minutes": minutes}
    if not minutes or minutes <= 0:
        return Finding(CHECK, label, "PCIe replays", INFO, f"{replays} replays (no time span to "
                       "rate them over)", details=details)
    rate = replays / minutes
    text = f"{replays:,} replays, {rate:,.2f} per minute {over}"
    if rate > limit.value:
        return Finding(
            CHECK,
            label,
            "PCIe replays",
            WARN,
            f"{text}, above NVIDIA's {limit.value:.0f} per minute: the link retransmits; check "
            "the PCIe link row, reseat the GPU or riser, look at the AER rows",
            rate,
            "/min",
            limit.value,
            limit.source,
            details,
        )
    return Finding(CHECK, label, "PCIe replays", PASS, text, rate, "/min", limit.value,
                   limit.source, details)


# --- PCIe AER -----------------------------------------------------------------------------


def aer_finding(label: str, counters: aer_reader.GpuAer) -> Finding:
    """The GPU's AER counters and its link partner's, judged by the kernel's classes."""
    limit = LIMITS["aer"]
    sides = [("GPU", counters.gpu)]
    if counters.upstream is not None:
        sides.append(("port above", counters.upstream))
    if not any(c.supported for _, c in sides):
        return Finding(CHECK, label, "PCIe AER", SKIP, "no AER counters in sysfs for this GPU "
                       "(kernel without AER, or AER not enabled for the slot)",
                       details={"pci": counters.gpu.bdf})
    totals: dict[str, int] = defaultdict(int)
    parts = []
    for name, side in sides:
        for kind, total in side.totals.items():
            if total:
                totals[kind] += total
                named = ", ".join(f"{k} {v}" for k, v in side.errors.get(kind, {}).items())
                named = f" ({named})" if named else ""
                parts.append(f"{name} {side.bdf}: {total} {kind}{named}")
    details = {
        "pci": counters.gpu.bdf,
        "gpu": counters.gpu.totals,
        "upstream": counters.upstream.totals if counters.upstream else None,
        "upstream_pci": counters.upstream.bdf if counters.upstream else None,
        "errors": {name: side.errors for name, side in sides},
    }
    found = "; ".join(parts)
    if totals["fatal"]:
        return Finding(CHECK, label, "PCIe AER", FAIL, f"{found}: fatal PCIe errors make the link "
                       "unreliable; drain the node, reseat the GPU and riser, replace the part if "
                       "they return", totals["fatal"], "errors", 0, limit.source, details)
    if totals["nonfatal"]:
        return Finding(CHECK, label, "PCIe AER", WARN, f"{found}: uncorrectable (non-fatal) PCIe "
                       "errors lose transactions; reseat the GPU and riser, watch for more",
                       totals["nonfatal"], "errors", 0, limit.source, details)
    if totals["correctable"]:
        return Finding(CHECK, label, "PCIe AER", PASS, f"{found} (corrected by the hardware; a "
                       "count that keeps rising points at the slot or riser)",
                       totals["correctable"], "errors", None, limit.source, details)
    return Finding(CHECK, label, "PCIe AER", PASS, "no PCIe errors counted (GPU and the port "
                   "above it)" if counters.upstream else "no PCIe errors counted", 0, "errors",
                   None, limit.source, details)


# --- the check ----------------------------------------------------------------------------


@dataclass
class Readings:
    """Everything the errors rules judge, read once."""

    scan: Scan
    gpus: list[nvml_errors.GpuErrors]
    aer: dict[str, aer_reader.GpuAer]  # sysfs bus address -> counters
    pci_gpus: list[str]  # NVIDIA GPUs on the PCI bus (sysfs), driver or not


def read(
    nvml: Any,
    *,
    kernel_log_path: Path | None = None,
    sysfs: Path | None = None,
    after_us: int | None = None,
    deadline_s: float = 20.0,
    uptime_s: float | None = None,
) -> Readings:
    """Read the kernel log, NVML's counters (``nvml`` None: no driver) and sysfs.

    ``uptime_s``: a saved log reaching past it is another boot's (``kernel_log.scan``).
    """
    sysfs = sysfs or aer_reader.SYSFS_PCI
    pci_gpus = aer_reader.nvidia_gpus(sysfs)
    scan = kernel_log.scan(kernel_log_path, after_us=after_us, deadline_s=deadline_s,
                           uptime_s=uptime_s)
    gpus = nvml_errors.read_all(nvml) if nvml is not None else []
    counters = {bdf: aer_reader.read_gpu(bdf, sysfs) for bdf in pci_gpus}
    return Readings(scan, gpus, counters, pci_gpus)


def uptime_minutes(path: Path = Path("/proc/uptime")) -> float | None:
    try:
        return float(path.read_text().split()[0]) / 60
    except (OSError, ValueError, IndexError):
        return None


def judge(
    readings: Readings,
    labels: dict[int, str] | None = None,
    *,
    replay_minutes: float | None = None,
    replay_baseline: dict[str, int] | None = None,
    since: str = "since boot",
) -> list[Finding]:
    """The errors rows for ``readings``; ``labels`` maps NVML indices to the battery's labels.

    ``replay_baseline`` (bus address -> count) and ``replay_minutes`` rate the PCIe replays
    between two readings (``workloads health``); without them the rate is since boot.
    """
    labels = labels or {}
    by_pci: dict[str, str] = {}
    for gpu in readings.gpus:
        label = labels.get(gpu.index, f"GPU {gpu.index}")
        if gpu.pci:
            by_pci[device_key(gpu.pci)] = label
    for bdf in readings.pci_gpus:
        by_pci.setdefault(device_key(bdf), f"PCI {bdf}")
    present = bool(readings.gpus or readings.pci_gpus)
    findings = [kernel_log_finding(readings.scan, present, since)]
    findings += event_findings(readings.scan.groups, xid.load(), by_pci, since)
    minutes = replay_minutes if replay_minutes is not None else uptime_minutes()
    over = since if replay_minutes is not None else "since boot (a lower bound)"
    for gpu in readings.gpus:
        label = labels.get(gpu.index, f"GPU {gpu.index}")
        link = nvlink_finding(label, gpu)
        if link is not None:
            findings.append(link)
        replays = gpu.pcie_replays
        if replays is not None and replay_baseline and gpu.pci in replay_baseline:
            replays = max(0, replays - replay_baseline[gpu.pci])
        findings.append(pcie_replay_finding(label, replays, minutes, over))
    for bdf, counters in readings.aer.items():
        findings.append(aer_finding(by_pci.get(device_key(bdf), f"PCI {bdf}"), counters))
    if not present:
        findings.append(Finding(CHECK, "host", "GPU links", SKIP, "no NVIDIA GPU on the PCI bus "
                                "or through NVML: no link counters to read"))
    return findings


def collect(nvml: Any, labels: dict[int, str] | None = None, **read_options: Any) -> list[Finding]:
    """The ``errors`` check as the battery runs it: read everything, judge it.

    A saved log (the battery reads it just after it was saved on this boot) is held to this
    boot's uptime, so another boot's log is not read as this one's.
    """
    if read_options.get("kernel_log_path") is not None and "uptime_s" not in read_options:
        minutes = uptime_minutes()
        read_options["uptime_s"] = minutes * 60 if minutes is not None else None
    return judge(read(nvml, **read_options), labels)
