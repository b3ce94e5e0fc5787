"""The GPU-pair bandwidth matrix: a copy between every ordered pair of local GPUs.

An all-reduce ring averages a single bad link away; a copy from each GPU to each other one
names it. Measured as nvbandwidth measures: every ordered pair (both directions), the
median of the repetitions (not the best), and the copied bytes read back and compared.

Each pair's figure is held to the pair's own limit, from what NVML says joins the two
(:mod:`workloads.hardware.topology`): the links between them × their version's per-link
rate ("2 × NVLink 2.0" on a DGX-1's doubly linked pairs), the GPU's whole NVLink rate
through an NVSwitch, or the slower GPU's PCIe link for a pair with no link ("PCIe via CPU
socket", "PCIe across sockets"), the path named in the row. Thresholds from published
practice (``reference.yaml``: ``p2p_nvlink``, ``p2p_pcie``); each pair is also held to the
pairs joined as it is (``siblings``), and a pair whose slowest repetition is far below its
median is named intermittent (``p2p_repeats``). A pair the driver will not copy between
directly over NVLink fails on its own: its traffic goes through host memory.

Rows: one ``pair matrix`` row per host with the slowest pair as its figure and the whole
matrix in ``details`` (what the terminal and the fleet report draw), then one row per pair
below its warn line, naming both GPUs. On a host without GPUs the same copies run between
the logical CPU devices, as figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from workloads.accept import verdicts
from workloads.accept.checks import Sizes, Target, interconnect_limit
from workloads.accept.kernels import Device, Kernels
from workloads.accept.verdicts import FAIL, INFO, SKIP, Finding, worst
from workloads.hardware.copy_engine import PeerCopy
from workloads.hardware.nvml import nvlink_version
from workloads.hardware.reference import Reference

MIB = 1 << 20
HINT = (
    "check `nvidia-smi topo -m` and `nvidia-smi nvlink -s` for these two GPUs, then Fabric "
    "Manager; on PCIe, the switch or root port between them and ACS"
)


def check_p2p(
    kernels: Kernels,
    targets: list[Target],
    size: Sizes,
    reference: Reference,
    tick: Callable[[str], None],
) -> list[Finding]:
    devices = kernels.peer_devices()
    label = f"{'GPUs' if devices and devices[0].kind == 'GPU' else 'CPU devices'} ×{len(devices)}"
    if len(devices) < 2:
        tick("one device")
        return [Finding("p2p", label, "pair matrix", SKIP, "one device: no pair to copy between")]
    by_label = {t.label: t for t in targets}
    labels = [d.label for d in devices]
    n = len(devices)
    matrix: list[list[float | None]] = [[None] * n for _ in devices]
    slowest_of: list[list[float | None]] = [[None] * n for _ in devices]
    direct: list[list[bool | None]] = [[None] * n for _ in devices]
    verified: list[list[bool | None]] = [[None] * n for _ in devices]
    limits: list[list[float | None]] = [[None] * n for _ in devices]
    paths: list[list[str | None]] = [[None] * n for _ in devices]
    pairs: dict[tuple[int, int], Finding] = {}
    for i, source in enumerate(devices):
        for j, target in enumerate(devices):
            if i == j:
                continue
            tick(f"{source.label} → {target.label}")
            run = kernels.peer_rate(source, target, size.p2p_bytes, size.p2p_repeats)
            gbps = run.rate / 1e9
            matrix[i][j], direct[i][j], verified[i][j] = gbps, run.direct, run.verified
            slowest_of[i][j] = run.slowest / 1e9
            limit, source_text, threshold = pair_limit(
                by_label.get(source.label), by_label.get(target.label), reference
            )
            limits[i][j], paths[i][j] = limit, source_text
            pair = _pair_finding(
                source, target, gbps, run.direct, limit, source_text, threshold, size, reference
            )
            pairs[(i, j)] = _repetitions(pair, run, reference)
    pairs = _against_like_pairs(pairs, reference)
    verdict_of = [[pairs[(i, j)].verdict if i != j else None for j in range(n)] for i in range(n)]
    order = sorted(pairs)
    figures = [(matrix[i][j], i, j) for i, j in order]
    slowest, i, j = min((v, a, b) for v, a, b in figures if v is not None)
    median = statistics.median(v for v, _, _ in figures if v is not None)
    findings = [pairs[key] for key in order]
    summary_verdict = worst(f.verdict for f in findings)
    judged = [f for f in findings if f.limit]
    slow_pair = pairs[(i, j)]
    below = [f for f in findings if f.verdict in (verdicts.WARN, FAIL)]
    named = ", ".join(f"{f.device} {f.value:,.0f}" for f in below[:4])
    more = f" and {len(below) - 4} more" if len(below) > 4 else ""
    reason = (
        f"slowest pair {labels[i]} → {labels[j]} {slowest:,.1f} GB/s, median {median:,.1f} GB/s"
        + (f"; {slow_pair.reason}" if slow_pair.limit else "")
        + (f"; {len(below)} pair(s) below their line: {named}{more} GB/s" if below else "")
        + ("" if judged else "; no interconnect limit to judge against: figures only")
    )
    details: dict[str, Any] = {
        "labels": labels,
        "gbps": matrix,
        "slowest_gbps": slowest_of,
        "direct": direct,
        "verified": verified,
        "limit_gbps": limits,
        "path": paths,
        "verdict": verdict_of,
        "bytes": size.p2p_bytes,
        "repeats": size.p2p_repeats,
        "statistic": "median of the repetitions (as nvbandwidth reports)",
        "method": "copy engines (cuda-bindings)"
        if any(d is not None for row in direct for d in row)
        else "the framework's copies",
    }
    summary = Finding(
        "p2p",
        label,
        "pair matrix",
        summary_verdict if judged or summary_verdict == FAIL else INFO,
        reason,
        slowest,
        "GB/s",
        slow_pair.limit,
        slow_pair.limit_source,
        details,
    )
    return [summary, *below]


def _repetitions(pair: Finding, run: PeerCopy, reference: Reference) -> Finding:
    """A pair whose bytes arrived wrong fails; one whose slowest repetition is far below its
    median is named as an intermittent link (``p2p_repeats``)."""
    if run.verified is False:
        return replace(pair, verdict=FAIL, reason=(
            f"the copied bytes differ from those sent ({pair.device}): the path corrupts "
            f"data, whatever its speed; {HINT}"))
    if not run.rate or run.repeats < 2 or not pair.limit:
        return pair  # a figure only (logical CPU devices, no NVML): nothing to hold it to
    threshold = reference.thresholds["p2p_repeats"]
    share = run.slowest / run.rate
    if share >= threshold.warn_below:
        return pair
    verdict = FAIL if share < threshold.fail_below else verdicts.WARN
    note = (f"intermittent: its slowest of {run.repeats} copies ran at "
            f"{run.slowest / 1e9:,.1f} GB/s, {share:.0%} of its median {run.rate / 1e9:,.1f}")
    return replace(pair, verdict=worst([pair.verdict, verdict]),
                   reason=f"{note}; {pair.reason}; {HINT}")


def _against_like_pairs(
    pairs: dict[tuple[int, int], Finding], reference: Reference
) -> dict[tuple[int, int], Finding]:
    """Each pair against the median of the other pairs joined the same way (same path, same
    limit): a pair 40 % slower than its like pairs is the link, whatever the loose PCIe line."""
    threshold = reference.thresholds["siblings"]
    alike: dict[tuple[str | None, float | None], list[tuple[int, int]]] = {}
    for key, finding in pairs.items():
        if finding.limit:  # pairs with a path to be joined by; CPU devices' are figures only
            alike.setdefault((finding.limit_source, finding.limit), []).append(key)
    result = dict(pairs)
    for keys in alike.values():
        if len(keys) < 2:
            continue
        for key in keys:
            mine = pairs[key]
            others = [v for k in keys if k != key and (v := pairs[k].value) is not None]
            median = statistics.median(others) if others else None
            if not median or mine.value is None:
                continue
            share = mine.value / median
            if share >= threshold.warn_below:
                continue
            verdict = FAIL if share < threshold.fail_below else verdicts.WARN
            result[key] = replace(mine, verdict=worst([mine.verdict, verdict]), reason=(
                f"{1 - share:.0%} slower than the pairs joined as it is (median "
                f"{median:,.1f} GB/s); {mine.reason}"
                + ("" if HINT in mine.reason else f"; {HINT}")))
    return result


def pair_limit(
    source: Target | None, target: Target | None, reference: Reference
) -> tuple[float | None, str, str]:
    """Per-direction GB/s one copy between these two GPUs can reach, its path, the threshold.

    From what NVML says joins the pair (:mod:`workloads.hardware.topology`): the links
    between the two × their version's per-link rate; through an NVSwitch, the GPU's whole
    rate (its links to the switches); with no link, the slower GPU's PCIe link, and the
    PCIe path named. Without the graph (no NVML), the board-wide rule of the all-reduce.
    """
    if source is None or target is None or source.watch is None or target.watch is None:
        return None, "no NVML figures for this pair", "p2p_pcie"
    graph = source.topology
    path = graph.path(source.watch.facts.index, target.watch.facts.index) if graph else None
    if path is None:
        limit, text, threshold = interconnect_limit([source, target], reference)
        return limit, text, "p2p_nvlink" if threshold == "allreduce_nvlink" else "p2p_pcie"
    if path.kind in ("nvlink", "nvswitch"):
        decoded = nvlink_version(path.version)
        models = [t.model for t in (source, target)]
        specs = [m.nvlink.generation for m in models if m is not None and m.nvlink is not None]
        generation = decoded[0] if decoded else (min(specs) if specs else None)
        limit = reference.nvlink_gbps(generation, path.links)
        cite = reference.ref(reference.nvlink_source)
        if not path.links:
            return None, f"{path.text()}: no limit to judge against", "p2p_nvlink"
        if limit is None:
            return None, f"{path.text()}: no sourced figure for its per-link rate", "p2p_nvlink"
        return limit, f"{path.text()} {cite}", "p2p_nvlink"
    rates = [reference.pcie_gbps(w.facts.pcie_max_generation, w.facts.pcie_max_width)
             for w in (source.watch, target.watch)]
    known = [r for r in rates if r is not None]
    if len(known) < len(rates):
        return None, f"{path.text()}: no PCIe link figures from NVML", "p2p_pcie"
    cite = reference.ref(reference.pcie_source)
    return min(known), f"{path.text()}, the slower GPU's link {cite}", "p2p_pcie"


def _pair_finding(
    source: Device,
    target: Device,
    gbps: float,
    peer: bool | None,
    limit: float | None,
    limit_source: str,
    threshold: str,
    size: Sizes,
    reference: Reference,
) -> Finding:
    where = f"{source.label} → {target.label}"
    item = f"copy {size.p2p_bytes // MIB} MiB"
    if peer is False and threshold == "p2p_nvlink":
        return Finding(
            "p2p",
            where,
            item,
            FAIL,
            f"{gbps:,.1f} GB/s with no direct peer access between {source.label} and "
            f"{target.label} on an NVLink board: the copy goes through host memory; {HINT}",
            gbps,
            "GB/s",
            limit,
            limit_source,
        )
    finding = verdicts.against_limit(
        "p2p",
        where,
        item,
        gbps,
        "GB/s",
        limit,
        reference.thresholds[threshold],
        limit_source,
        no_limit_reason=f"{limit_source}: figure only",
    )
    if finding.verdict in (verdicts.WARN, FAIL):
        return Finding(
            finding.check,
            finding.device,
            finding.item,
            finding.verdict,
            f"{finding.reason.split(':')[0]}: the link between {source.label} and "
            f"{target.label}; {HINT}",
            finding.value,
            finding.unit,
            finding.limit,
            finding.limit_source,
        )
    return finding
