"""Verdict rules: pure functions from recorded measurements and NVML readings to findings.

Nothing here measures or reads hardware, so every rule is tested with recorded inputs
(a link at x8 of x16, a clock held at 40 %, a pending row remap, an all-reduce at
40 % of its fabric, one GPU slower than its siblings). Each finding says what was
measured, against which limit, the fraction, the verdict, and a reason a person can
act on.

Verdicts: ``pass``, ``warn``, ``fail`` against a limit; ``info`` for a figure with no
limit to judge it by (an unknown GPU, a CPU without a datasheet); ``skip`` for a check
that does not apply here (no PCIe link on a CPU, DCGM not installed).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import pynvml

from workloads.hardware.nvml import REASON_NAMES, GpuWatch
from workloads.hardware.reference import Threshold

PASS, WARN, FAIL, INFO, SKIP = "pass", "warn", "fail", "info", "skip"
SEVERITY = {SKIP: 0, INFO: 0, PASS: 1, WARN: 2, FAIL: 3}

# What to look at when a measured figure is low, per check.
HINTS = {
    "matmul": "look at this GPU's clocks and throttle rows, and at what else runs on it",
    "membw": "look at the memory clock and the ECC rows; reseat or replace the GPU if it stays",
    "transfer": "look at the PCIe link row, the slot or riser, and the NUMA node of the process",
    "allreduce": "look at the NVLink rows, Fabric Manager and NCCL's P2P settings (NCCL_P2P_LEVEL)",
    "training": "compare with the matmul rows: a low matmul peak explains a low MFU",
    "p2p": "look at `nvidia-smi topo -m` and the NVLink rows of both GPUs",
    "soak": "look at this GPU's throttle row, its cooling and the power it was given",
}

# Reasons that hold the clock for a fault (fail), for heat (warn), or as designed (named only).
HARDWARE_REASONS = (
    pynvml.nvmlClocksEventReasonHwSlowdown
    | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
)
THERMAL_REASONS = pynvml.nvmlClocksEventReasonSwThermalSlowdown
NAMED_REASONS = (
    pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonApplicationsClocksSetting
)


@dataclass(frozen=True)
class Finding:
    """One row of the verdict table."""

    check: str  # matmul, membw, transfer, allreduce, training, nvml, dcgm, host
    device: str  # "GPU 0", "CPU", "GPUs 0-7", "host"
    item: str  # what on the device: "bfloat16", "1 GiB", "PCIe link", "clocks"
    verdict: str
    reason: str
    value: float | None = None
    unit: str = ""
    limit: float | None = None
    limit_source: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def fraction(self) -> float | None:
        if self.value is None or not self.limit:
            return None
        return self.value / self.limit

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["fraction"] = self.fraction
        return data


def worst(verdicts: Iterable[str]) -> str:
    """The most severe verdict (``pass`` when there is nothing to judge)."""
    chosen = PASS
    for verdict in verdicts:
        if SEVERITY[verdict] > SEVERITY[chosen]:
            chosen = verdict
    return chosen


def _percent(fraction: float) -> str:
    return f"{fraction:.0%}"


def _figure(value: float, unit: str) -> str:
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def against_limit(
    check: str,
    device: str,
    item: str,
    value: float,
    unit: str,
    limit: float | None,
    threshold: Threshold | None,
    limit_source: str | None,
    *,
    no_limit_reason: str = "no datasheet figure for this device: figure only",
) -> Finding:
    """``value`` as a fraction of ``limit``, judged by ``threshold``; ``info`` without a limit."""
    if not limit or threshold is None:
        return Finding(check, device, item, INFO, no_limit_reason, value, unit, None, limit_source)
    fraction = value / limit
    of = f"{_percent(fraction)} of {_figure(limit, unit)} ({limit_source})"
    if fraction < threshold.fail_below:
        verdict = FAIL
        reason = f"{of}, below the {_percent(threshold.fail_below)} fail line: {HINTS[check]}"
    elif fraction < threshold.warn_below:
        verdict = WARN
        reason = f"{of}, below the {_percent(threshold.warn_below)} warn line: {HINTS[check]}"
    else:
        verdict = PASS
        reason = of
    return Finding(check, device, item, verdict, reason, value, unit, limit, limit_source)


SIBLING_CHECKS = ("matmul", "membw")


def compare_siblings(
    findings: list[Finding],
    threshold: Threshold,
    group: dict[str, str],
    checks: tuple[str, ...] = SIBLING_CHECKS,
) -> list[Finding]:
    """Mark a device well below its siblings' median (same check, item and GPU model).

    ``group`` maps a device label to its model; devices of one model are siblings.
    Each device is compared with the median of the OTHER devices, so with two GPUs
    each is held to the other. The verdict only ever gets worse. Only the device's
    own compute and memory (``checks``) are compared: host transfers differ by NUMA
    node on a healthy two-socket host, and that is topology, not a faulty GPU.
    """
    buckets: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for i, f in enumerate(findings):
        if f.value is not None and f.device in group and f.check in checks:
            buckets[(f.check, f.item, group[f.device])].append(i)
    result = list(findings)
    for indices in buckets.values():
        if len(indices) < 2:
            continue
        for i in indices:
            mine = findings[i]
            others = [findings[j].value for j in indices if j != i]
            median = statistics.median(v for v in others if v is not None)
            if not median or mine.value is None:
                continue
            share = mine.value / median
            if share < threshold.fail_below:
                verdict = FAIL
            elif share < threshold.warn_below:
                verdict = WARN
            else:
                continue
            note = (
                f"{_percent(1 - share)} slower than its siblings (median "
                f"{_figure(median, mine.unit)}): this device, not the model, is the problem"
            )
            result[i] = replace(
                mine,
                verdict=worst([mine.verdict, verdict]),
                reason=f"{note}; {mine.reason}",
                details={**mine.details, "siblings_median": median, "siblings_share": share},
            )
    return result


# --- the link and the fabric -----------------------------------------------------------


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' all-reduce bus bandwidth: ``algbw × 2(n−1)/n`` (doc/PERFORMANCE.md)."""
    if ranks < 1:
        raise ValueError("an all-reduce needs at least one rank")
    return algbw * 2 * (ranks - 1) / ranks


def algorithm_bandwidth(bytes_per_rank: int, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth ``S / t`` in GB/s (S: bytes per rank)."""
    return bytes_per_rank / seconds / 1e9


def pcie_link(device: str, watch: GpuWatch) -> Finding:
    """The link's width and generation against what it can train to.

    The generation is judged at its highest under load (an idle GPU lowers its link
    to Gen1 with its P-state, so an idle reading says nothing); the width at its
    lowest over all samples (a link at x8 stays at x8). Without a sample under load
    (``--only nvml``) only the width is judged.
    """
    facts = watch.facts
    loaded = [s.pcie_generation for s in watch.loaded() if s.pcie_generation]
    gens = loaded or [s.pcie_generation for s in watch.samples if s.pcie_generation]
    widths = [s.pcie_width for s in watch.samples if s.pcie_width]
    if not gens or not widths or not facts.pcie_max_generation or not facts.pcie_max_width:
        return Finding("nvml", device, "PCIe link", SKIP, "NVML gives no PCIe link figures here")
    gen, width = max(gens), min(widths)
    max_gen, max_width = facts.pcie_max_generation, facts.pcie_max_width
    text = f"Gen{gen} x{width} (can train to Gen{max_gen} x{max_width})"
    if not loaded:
        gen = max_gen  # not judged: no reading under load
        text = f"x{width} of x{max_width}; generation not judged (no sample under load)"
    details = {
        "generation": gen,
        "width": width,
        "max_generation": max_gen,
        "max_width": max_width,
        "gpu_max_generation": facts.pcie_gpu_max_generation,
    }
    if width < max_width:
        return Finding(
            "nvml",
            device,
            "PCIe link",
            FAIL,
            f"{text}: the link trained to x{width} of x{max_width}, halving host transfers "
            "or worse; reseat the GPU, check the riser/slot, then reboot",
            details=details,
        )
    if gen < max_gen:
        return Finding(
            "nvml",
            device,
            "PCIe link",
            FAIL,
            f"{text}: below Gen{max_gen} even under load; check the slot's BIOS setting "
            "(PCIe speed), the riser, then reseat",
            details=details,
        )
    gpu_max = facts.pcie_gpu_max_generation
    if gpu_max and gpu_max > max_gen:
        return Finding(
            "nvml",
            device,
            "PCIe link",
            WARN,
            f"{text}: the slot limits this Gen{gpu_max} GPU to Gen{max_gen}; move it to a "
            f"Gen{gpu_max} slot for full host bandwidth",
            details=details,
        )
    return Finding("nvml", device, "PCIe link", PASS, text, details=details)


# --- clocks, throttling, power and heat ------------------------------------------------


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in REASON_NAMES.items() if mask & bit]


def clocks(device: str, watch: GpuWatch, threshold: Threshold) -> Finding:
    """The SM clock under load (median of the loaded samples) against its maximum."""
    loaded = [s.sm_clock_mhz for s in watch.loaded() if s.sm_clock_mhz]
    top = watch.facts.max_sm_clock_mhz
    if not loaded or not top:
        return Finding("nvml", device, "SM clock", SKIP, "no NVML sample under load")
    median = statistics.median(loaded)
    fraction = median / top
    text = f"median {median:,.0f} MHz under load of {top:,} MHz maximum ({_percent(fraction)})"
    if fraction < threshold.fail_below:
        verdict, reason = FAIL, f"{text}: the clock is held down; see the throttle row"
    elif fraction < threshold.warn_below:
        verdict, reason = WARN, f"{text}: below the {_percent(threshold.warn_below)} warn line"
    else:
        verdict, reason = PASS, text
    return Finding(
        "nvml", device, "SM clock", verdict, reason, median, "MHz", top, "NVML max clock"
    )


def throttle(device: str, watch: GpuWatch) -> Finding:
    """Every clock-event reason seen under load, named; hardware slowdowns fail."""
    loaded = watch.loaded() or watch.samples
    mask = 0
    for sample in loaded:
        mask |= sample.reasons or 0
    temps = [s.temperature_c for s in watch.samples if s.temperature_c is not None]
    powers = [s.power_w for s in watch.samples if s.power_w is not None]
    limit = watch.facts.power_limit_w
    heat = f"max {max(temps)} °C" if temps else "temperature unknown"
    power = (
        f"max {max(powers):,.0f} W of {limit:,.0f} W"
        if powers and limit
        else (f"max {max(powers):,.0f} W" if powers else "power unknown")
    )
    details = {
        "reasons_mask": mask,
        "reasons": reason_names(mask),
        "max_temperature_c": max(temps) if temps else None,
        "max_power_w": max(powers) if powers else None,
        "power_limit_w": limit,
    }
    if mask & HARDWARE_REASONS:
        names = ", ".join(reason_names(mask & HARDWARE_REASONS))
        return Finding(
            "nvml",
            device,
            "throttling",
            FAIL,
            f"{names} under load ({heat}, {power}): check cooling, the power supply and "
            "the board's power-brake signal",
            details=details,
        )
    if mask & THERMAL_REASONS:
        return Finding(
            "nvml",
            device,
            "throttling",
            WARN,
            f"software thermal slowdown under load ({heat}, {power}): check airflow and "
            "the fan or coolant settings",
            details=details,
        )
    named = reason_names(mask & NAMED_REASONS)
    note = f"{', '.join(named)} (as designed under full load); " if named else "none; "
    return Finding("nvml", device, "throttling", PASS, f"{note}{heat}, {power}", details=details)


# --- memory errors ----------------------------------------------------------------------


def memory_errors(device: str, watch: GpuWatch) -> Finding:
    """ECC counters, remapped rows (Ampere+) and retired pages (before Ampere)."""
    f = watch.facts
    rows = f.remapped_rows
    details = {
        "ecc_uncorrected_volatile": f.ecc_uncorrected_volatile,
        "ecc_uncorrected_aggregate": f.ecc_uncorrected_aggregate,
        "ecc_corrected_volatile": f.ecc_corrected_volatile,
        "remapped_rows": rows,
        "retired_pages_pending": f.retired_pages_pending,
    }
    if rows is not None and rows[3]:
        return Finding(
            "nvml",
            device,
            "memory errors",
            FAIL,
            "row remapping FAILED: the GPU cannot repair its memory; replace it (RMA)",
            details=details,
        )
    if rows is not None and rows[2]:
        return Finding(
            "nvml",
            device,
            "memory errors",
            FAIL,
            f"a row remap is pending ({rows[1]} rows remapped for uncorrectable "
            "errors): reset the GPU (nvidia-smi -r) or reboot to apply it",
            details=details,
        )
    if f.retired_pages_pending:
        return Finding(
            "nvml",
            device,
            "memory errors",
            FAIL,
            "a page retirement is pending: reset the GPU or reboot to apply it",
            details=details,
        )
    if f.ecc_uncorrected_volatile:
        return Finding(
            "nvml",
            device,
            "memory errors",
            FAIL,
            f"{f.ecc_uncorrected_volatile} uncorrectable ECC errors since the driver "
            "loaded: drain the node, reset the GPU, watch whether they return",
            details=details,
        )
    if rows is not None and rows[1]:
        return Finding(
            "nvml",
            device,
            "memory errors",
            WARN,
            f"{rows[1]} rows remapped for uncorrectable errors (applied, none "
            "pending): healthy now; replace the GPU if the count keeps rising",
            details=details,
        )
    if f.ecc_uncorrected_aggregate:
        return Finding(
            "nvml",
            device,
            "memory errors",
            WARN,
            f"{f.ecc_uncorrected_aggregate} uncorrectable ECC errors over the GPU's "
            "life, none since the driver loaded",
            details=details,
        )
    known = [v for v in (f.ecc_uncorrected_volatile, rows) if v is not None]
    if not known:
        return Finding(
            "nvml",
            device,
            "memory errors",
            SKIP,
            "no ECC or row-remapping counters on this GPU",
            details=details,
        )
    corrected = f.ecc_corrected_volatile or 0
    return Finding(
        "nvml",
        device,
        "memory errors",
        PASS,
        f"no uncorrectable errors, nothing pending ({corrected} corrected since load)",
        details=details,
    )


def busy_host(share: float | None, limit: float) -> Finding:
    """Whether other processes used the CPU while the battery ran (its figures would be low)."""
    if share is None:
        return Finding("host", "host", "other load", SKIP, "/proc/stat not readable here")
    text = f"other processes used {_percent(share)} of the CPU time during the battery"
    if share > limit:
        return Finding(
            "host",
            "host",
            "other load",
            WARN,
            f"{text}: figures may be low; run again on an idle host",
            share * 100,
            "%",
        )
    return Finding("host", "host", "other load", PASS, text, share * 100, "%")
