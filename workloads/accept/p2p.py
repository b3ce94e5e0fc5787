"""The GPU-pair bandwidth matrix: a copy between every ordered pair of local GPUs.

An all-reduce ring averages a single bad link away; a copy from each GPU to each other one
names it. Each pair's figure is held to the pair's own limit: with NVLink up on both GPUs
of a board that joins them all, the slower GPU's NVLink rate per direction (its active
links × its generation's per-link rate, as the all-reduce's limit); otherwise the slower
of the two PCIe links. Thresholds from published practice (``reference.yaml``:
``p2p_nvlink``, ``p2p_pcie``). A pair the driver will not copy between directly on an
NVLink board fails on its own: its traffic goes through host memory.

Rows: one ``pair matrix`` row per host with the slowest pair as its figure and the whole
matrix in ``details`` (what the terminal and the fleet report draw), then one row per pair
below its warn line, naming both GPUs. On a host without GPUs the same copies run between
the logical CPU devices, as figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from workloads.accept import verdicts
from workloads.accept.checks import Sizes, Target, interconnect_limit
from workloads.accept.kernels import Device, Kernels
from workloads.accept.verdicts import FAIL, INFO, SKIP, Finding, worst
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
    matrix: list[list[float | None]] = [[None] * len(devices) for _ in devices]
    direct: list[list[bool | None]] = [[None] * len(devices) for _ in devices]
    limits: list[list[float | None]] = [[None] * len(devices) for _ in devices]
    verdict_of: list[list[str | None]] = [[None] * len(devices) for _ in devices]
    pairs: list[Finding] = []
    for i, source in enumerate(devices):
        for j, target in enumerate(devices):
            if i == j:
                continue
            tick(f"{source.label} → {target.label}")
            rate, peer = kernels.peer_rate(source, target, size.p2p_bytes, size.p2p_repeats)
            gbps = rate / 1e9
            matrix[i][j], direct[i][j] = gbps, peer
            limit, source_text, threshold = pair_limit(
                by_label.get(source.label), by_label.get(target.label), reference
            )
            limits[i][j] = limit
            pair = _pair_finding(
                source, target, gbps, peer, limit, source_text, threshold, size, reference
            )
            verdict_of[i][j] = pair.verdict
            pairs.append(pair)
    figures = [
        (matrix[i][j], i, j) for i in range(len(devices)) for j in range(len(devices)) if i != j
    ]
    slowest, i, j = min((v, a, b) for v, a, b in figures if v is not None)
    median = statistics.median(v for v, _, _ in figures if v is not None)
    summary_verdict = worst(f.verdict for f in pairs)
    judged = [f for f in pairs if f.limit]
    slow_pair = pairs[[(a, b) for _, a, b in figures].index((i, j))]
    below = [f for f in pairs if f.verdict in (verdicts.WARN, FAIL)]
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
        "direct": direct,
        "limit_gbps": limits,
        "verdict": verdict_of,
        "bytes": size.p2p_bytes,
        "method": "copy engines (cuda-bindings)"
        if any(d is not None for row in direct for d in row)
        else "the framework's copies",
    }
    summary = Finding(
        "p2p",
        label,
        "pair matrix",
        summary_verdict if judged else INFO,
        reason,
        slowest,
        "GB/s",
        slow_pair.limit,
        slow_pair.limit_source,
        details,
    )
    return [summary, *below]


def pair_limit(
    source: Target | None, target: Target | None, reference: Reference
) -> tuple[float | None, str, str]:
    """Per-direction GB/s one copy between these two GPUs can reach, what it is, the threshold."""
    if source is None or target is None or source.watch is None or target.watch is None:
        return None, "no NVML figures for this pair", "p2p_pcie"
    limit, text, threshold = interconnect_limit([source, target], reference)
    return limit, text, "p2p_nvlink" if threshold == "allreduce_nvlink" else "p2p_pcie"


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
