"""The measured checks: matmul peak, memory bandwidth, host transfers, all-reduce, training.

Each check measures with the backend layer (:mod:`workloads.accept.kernels`) and
turns its figures into findings with the verdict rules (:mod:`.verdicts`); the
limits come from the reference table through :class:`Target` (a device with its
NVML facts and datasheet model, when known).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from workloads.accept import verdicts
from workloads.accept.kernels import Device, Kernels, matmul_rate
from workloads.accept.verdicts import INFO, SKIP, WARN, Finding
from workloads.hardware.nvml import GpuWatch, nvlink_version
from workloads.hardware.reference import GpuModel, Reference
from workloads.hardware.topology import Topology

MIB = 1 << 20
Tick = Callable[[str], None]


@dataclass(frozen=True)
class Sizes:
    """How big and how often each check measures (``--quick`` is the same code, smaller)."""

    matmul: int
    matmul_repeats: int
    matmul_rounds: int
    membw_bytes: int
    membw_repeats: int
    membw_rounds: int
    transfer_bytes: int
    transfer_repeats: int
    allreduce_bytes: tuple[int, ...]
    allreduce_iterations: int
    train_batch: int
    train_steps: int
    cpu_devices: int
    p2p_bytes: int = 0  # each ordered pair's copy
    p2p_repeats: int = 0
    soak_matrix: int = 0  # the soak's square matmul


def sizes(on_gpu: bool, quick: bool) -> Sizes:
    """The sizes for a GPU or CPU host, full or ``--quick``."""
    base = _sizes(on_gpu, quick)
    if on_gpu:  # nvbandwidth copies 512 MiB per pair; 256 MiB is past the copy engines' ramp.
        # Five repetitions: a median that one slow copy does not move, and a slowest to name.
        return replace(
            base, p2p_bytes=(32 if quick else 256) * MIB, p2p_repeats=5, soak_matrix=8192
        )
    return replace(base, p2p_bytes=(4 if quick else 16) * MIB, p2p_repeats=3, soak_matrix=512)


def _sizes(on_gpu: bool, quick: bool) -> Sizes:
    from workloads.roofline import PEAK_MATRIX

    if on_gpu and not quick:
        return Sizes(
            8192,
            10,
            3,
            1024 * MIB,
            20,
            3,
            256 * MIB,
            5,
            tuple(MIB << s for s in range(0, 11, 2)),
            10,
            128,
            20,
            1,
        )
    if on_gpu:
        return Sizes(
            2048, 4, 2, 64 * MIB, 10, 2, 32 * MIB, 3, (MIB, 4 * MIB, 16 * MIB), 5, 32, 5, 1
        )
    if not quick:
        # The CPU peak is measured at the roofline's matrix size, so the two compare.
        return Sizes(
            PEAK_MATRIX,
            3,
            3,
            256 * MIB,
            5,
            3,
            0,
            0,
            (MIB, 4 * MIB, 16 * MIB, 64 * MIB),
            5,
            128,
            15,
            4,
        )
    return Sizes(PEAK_MATRIX, 2, 2, 32 * MIB, 5, 2, 0, 0, (MIB, 4 * MIB), 5, 32, 4, 2)


@dataclass
class Target:
    """A device the battery measures, with what is known of it."""

    device: Device
    watch: GpuWatch | None = None  # NVML facts and samples (GPUs with a driver)
    model: GpuModel | None = None  # the datasheet entry (GPUs in the reference table)
    topology: Topology | None = None  # what joins this host's GPUs (NVML), where read

    @property
    def label(self) -> str:
        return self.device.label


def matmul_dtypes(target: Target) -> list[str]:
    """float32, TF32 where it exists, bfloat16 where it exists, float16 (GPUs); CPUs: f32, bf16."""
    device = target.device
    if device.kind == "CPU":
        return ["float32", "bfloat16"]
    if target.model is not None and target.model.matmul_tflops:
        have = target.model.matmul_tflops
        return [
            d
            for d in ("float32", "tensorfloat32", "bfloat16", "float16")
            if d in have or d in ("float32", "float16")
        ]
    ampere = device.compute_capability is not None and device.compute_capability >= (8, 0)
    return ["float32", *(["tensorfloat32", "bfloat16"] if ampere else []), "float16"]


def datasheet_source(model: GpuModel, source: str, reference: Reference) -> str:
    return f"{model.model} datasheet {reference.ref(source)}"


def check_matmul(
    kernels: Kernels, targets: list[Target], size: Sizes, reference: Reference, tick: Tick
) -> list[Finding]:
    findings = []
    threshold = reference.thresholds["matmul"]
    for target in targets:
        for dtype in matmul_dtypes(target):
            tick(f"{target.label} {dtype}")
            rate = matmul_rate(
                kernels, target.device, dtype, size.matmul, size.matmul_repeats, size.matmul_rounds
            )
            item = f"{dtype} {size.matmul}²"
            if target.device.kind == "CPU":
                findings.append(_cpu_matmul(kernels, target, dtype, rate, item, reference))
                continue
            figure = target.model.matmul_tflops.get(dtype) if target.model else None
            finding = verdicts.against_limit(
                "matmul",
                target.label,
                item,
                rate / 1e12,
                "TFLOP/s",
                figure.value if figure else None,
                threshold,
                datasheet_source(target.model, figure.source, reference)
                if figure and target.model
                else None,
                no_limit_reason=f"no sourced figure for {target.model.model} {dtype}: figure only"
                if target.model is not None
                else "no datasheet figure for this device: figure only",
            )
            findings.append(finding)
    return findings


def _cpu_matmul(
    kernels: Kernels, target: Target, dtype: str, rate: float, item: str, reference: Reference
) -> Finding:
    """A CPU has no datasheet here: compare with its own idle peak from the cache, if any."""
    from workloads.bounded import read_json
    from workloads.roofline import PEAK_CACHE_MAX_BYTES, cache_path, is_provisional

    key = f"{kernels.backend}|{target.device.name}|{dtype}"
    try:
        entry = read_json(cache_path(), PEAK_CACHE_MAX_BYTES).get(key)
    except (OSError, ValueError, AttributeError):
        entry = None
    if isinstance(entry, dict) and entry.get("flops") and not is_provisional(entry):
        return verdicts.against_limit(
            "matmul",
            target.label,
            item,
            rate / 1e9,
            "GFLOP/s",
            float(entry["flops"]) / 1e9,
            reference.thresholds["siblings"],
            f"this CPU's idle peak, measured {entry.get('measured_at', '?')}",
        )
    return Finding(
        "matmul",
        target.label,
        item,
        INFO,
        "no datasheet for CPUs and no idle peak cached (`workloads check "
        "--refresh-peak` on an idle host measures one): figure only",
        rate / 1e9,
        "GFLOP/s",
    )


def check_membw(
    kernels: Kernels, targets: list[Target], size: Sizes, reference: Reference, tick: Tick
) -> list[Finding]:
    findings = []
    for target in targets:
        tick(target.label)
        rate = kernels.copy_rate(
            target.device, size.membw_bytes, size.membw_repeats, size.membw_rounds
        )
        item = f"copy {size.membw_bytes // MIB} MiB"
        model = target.model
        figure = model.memory_gbps if model else None
        findings.append(
            verdicts.against_limit(
                "membw",
                target.label,
                item,
                rate / 1e9,
                "GB/s",
                figure.value if figure else None,
                reference.thresholds["membw"],
                datasheet_source(model, figure.source, reference) if model and figure else None,
                no_limit_reason=(
                    "no datasheet figure for CPU memory: figure only"
                    if target.device.kind == "CPU"
                    else f"no sourced figure for {model.model}'s memory: figure only"
                    if model is not None
                    else "no datasheet figure for this GPU's memory: figure only"
                ),
            )
        )
    return findings


def check_transfer(
    kernels: Kernels, targets: list[Target], size: Sizes, reference: Reference, tick: Tick
) -> list[Finding]:
    if targets and targets[0].device.kind == "CPU":
        tick("CPU")
        return [
            Finding(
                "transfer",
                "CPU",
                "host↔device",
                SKIP,
                "no PCIe link on a CPU device: nothing to measure",
            )
        ]
    findings = []
    for target in targets:
        facts = target.watch.facts if target.watch else None
        gen = facts.pcie_max_generation if facts else None
        width = facts.pcie_max_width if facts else None
        limit = reference.pcie_gbps(gen, width)
        source = (
            (
                f"PCIe Gen{gen} x{width}, what the link can train to "
                f"{reference.ref(reference.pcie_source)}"
            )
            if limit
            else None
        )
        for to_device, item in ((True, "host→device"), (False, "device→host")):
            tick(f"{target.label} {item}")
            rate = kernels.transfer_rate(
                target.device, size.transfer_bytes, size.transfer_repeats, to_device
            )
            what = f"{item} {size.transfer_bytes // MIB} MiB"
            details = {"method": kernels.transfer_method}
            if not kernels.transfer_pinned:
                findings.append(
                    Finding(
                        "transfer",
                        target.label,
                        what,
                        WARN,
                        f"{rate / 1e9:,.1f} GB/s from pageable host memory: the driver's "
                        "staging, not the link, so not judged; install cuda-bindings "
                        "(requirements/) to measure from pinned memory",
                        rate / 1e9,
                        "GB/s",
                        details=details,
                    )
                )
                continue
            finding = verdicts.against_limit(
                "transfer",
                target.label,
                what,
                rate / 1e9,
                "GB/s",
                limit,
                reference.thresholds["transfer"],
                source,
                no_limit_reason="NVML gives no PCIe link figures for this GPU: figure only",
            )
            findings.append(replace(finding, details=details))
    return findings


def interconnect_limit(
    targets: list[Target], reference: Reference
) -> tuple[float | None, str, str]:
    """Per-direction GB/s each rank can move, what it is, and the threshold to use.

    NVLink when every GPU has links up and the board joins them all (SXM boards with
    NVSwitch or a mesh; bridged PCIe cards only as a pair); otherwise PCIe, at the
    slowest link's generation × width. A GPU's NVLink rate is its active links × the
    per-link rate of its board's NVLink generation (the reference table); for a GPU
    not in the table, of the generation NVML reports (the major of its
    ``nvmlNvlinkVersion_t``). Neither known: no limit, and the row says why.
    """
    watches = [t.watch for t in targets]
    if not targets or any(w is None for w in watches):
        return None, "no NVML figures for the interconnect", "allreduce_nvlink"
    active = [w.facts.nvlink_active or 0 for w in watches if w is not None]
    models = [t.model for t in targets]
    joined = (
        all(m is not None and m.nvlink is not None and not m.nvlink.optional for m in models)
        or len(targets) == 2
        or _all_joined_by_nvlink(targets)
    )
    if all(active) and joined:
        per_rank = [_nvlink_rate(t, reference) for t in targets]
        generations = sorted({g for _, g in per_rank if g is not None})
        links = min(active)
        if any(rate is None for rate, _ in per_rank):
            return (
                None,
                f"NVLink × {links} links per GPU, generation unknown (not in the table, and "
                "NVML names no version)",
                "allreduce_nvlink",
            )
        limit = min(rate for rate, _ in per_rank if rate is not None)
        generation = "/".join(str(g) for g in generations)
        return (
            limit,
            f"NVLink {generation} × {links} links per GPU {reference.ref(reference.nvlink_source)}",
            "allreduce_nvlink",
        )
    rates = [
        reference.pcie_gbps(w.facts.pcie_max_generation, w.facts.pcie_max_width)
        for w in watches
        if w is not None
    ]
    if not rates or any(v is None for v in rates):
        return None, "no PCIe link figures from NVML", "allreduce_pcie"
    slowest = min(v for v in rates if v is not None)
    return (
        slowest,
        f"PCIe, the slowest GPU link {reference.ref(reference.pcie_source)}",
        "allreduce_pcie",
    )


def _all_joined_by_nvlink(targets: list[Target]) -> bool:
    """Whether NVML's graph joins every pair by NVLink (a board whose links no document
    counts, such as an HGX of H100 SXM5 94GB, is still judged as the fabric it is)."""
    graph = targets[0].topology if targets else None
    indices = [t.watch.facts.index for t in targets if t.watch is not None]
    if graph is None or len(indices) < 2:
        return False
    paths = [graph.path(a, b) for a in indices for b in indices if a < b]
    return all(path is not None and path.kind != "pcie" for path in paths)


def _nvlink_rate(target: Target, reference: Reference) -> tuple[float | None, int | None]:
    """(per-direction GB/s of this GPU's active NVLinks, the generation it was taken at)."""
    assert target.watch is not None
    facts = target.watch.facts
    model = target.model
    generation = model.nvlink.generation if model is not None and model.nvlink else None
    if generation is None:
        decoded = [nvlink_version(v) for v in facts.nvlink_versions]
        majors = [v[0] for v in decoded if v is not None]
        generation = min(majors) if majors else None
    return reference.nvlink_gbps(generation, facts.nvlink_active), generation


def check_allreduce(
    kernels: Kernels, targets: list[Target], size: Sizes, reference: Reference, tick: Tick
) -> list[Finding]:
    ranks = len(kernels.collective_devices())
    on_cpu = bool(targets) and targets[0].device.kind == "CPU"
    label = f"{ranks} logical CPU devices" if on_cpu else f"GPUs ×{ranks}"
    if ranks < 2:
        tick("one device")
        return [Finding("allreduce", label, "sum", SKIP, "one device: nothing to reduce across")]
    findings = []
    best: tuple[float, int] | None = None
    for nbytes in size.allreduce_bytes:
        tick(_size_text(nbytes))
        seconds = kernels.allreduce_time(nbytes, size.allreduce_iterations)
        algbw = verdicts.algorithm_bandwidth(nbytes, seconds)
        busbw = verdicts.bus_bandwidth(algbw, ranks)
        findings.append(
            Finding(
                "allreduce",
                label,
                _size_text(nbytes),
                INFO,
                f"algbw {algbw:,.2f} GB/s, busbw {busbw:,.2f} GB/s (nccl-tests' definitions)",
                busbw,
                "GB/s",
                details={
                    "bytes_per_rank": nbytes,
                    "seconds": seconds,
                    "algbw_gbps": algbw,
                    "busbw_gbps": busbw,
                    "ranks": ranks,
                },
            )
        )
        if best is None or busbw > best[0]:
            best = (busbw, nbytes)
    assert best is not None
    if on_cpu:
        findings.append(
            Finding(
                "allreduce",
                label,
                "best busbw",
                INFO,
                "logical CPU devices share one memory: no interconnect limit to judge against",
                best[0],
                "GB/s",
            )
        )
        return findings
    limit, source, threshold = interconnect_limit(targets, reference)
    findings.append(
        verdicts.against_limit(
            "allreduce",
            label,
            f"best busbw ({_size_text(best[1])})",
            best[0],
            "GB/s",
            limit,
            reference.thresholds[threshold],
            source,
            no_limit_reason=f"{source}: figure only",
        )
    )
    return findings


def check_training(
    targets: list[Target], size: Sizes, reference: Reference, tick: Tick
) -> list[Finding]:
    from workloads import roofline
    from workloads.accept import training

    target = targets[0]
    on_gpu = target.device.kind == "GPU"
    tick(target.label)
    result = training.run(on_gpu, size.train_batch, size.train_steps)
    what = (
        f"{result.model} {result.image_size} px, {result.dtype_policy}, batch "
        f"{result.batch_size}{', XLA' if result.xla else ''}"
    )
    details: dict[str, Any] = {
        "model": result.model,
        "image_size": result.image_size,
        "batch_size": result.batch_size,
        "dtype_policy": result.dtype_policy,
        "xla": result.xla,
        "examples_per_sec": result.examples_per_sec,
        "step_time_s": result.step_time_s,
        "steps_measured": result.steps_measured,
        "flops_per_example": result.flops_per_example,
        "flops_method": result.flops_method,
    }
    if result.flops_per_example is None:
        return [
            Finding(
                "training",
                target.label,
                what,
                INFO,
                f"{result.examples_per_sec:,.0f} examples/s; FLOPs not countable here",
                details=details,
            )
        ]
    achieved = result.examples_per_sec * result.flops_per_example
    peak = roofline.mfu_peak(target.device.name, roofline.compute_dtype(result.dtype_policy))
    details.update(achieved_flops=achieved, peak=peak, mfu=achieved / peak["value"])
    rate = f"{result.examples_per_sec:,.0f} examples/s"
    if peak["source"] == "datasheet":
        finding = verdicts.against_limit(
            "training",
            target.label,
            what,
            achieved / 1e12,
            "TFLOP/s",
            peak["value"] / 1e12,
            reference.thresholds["training_mfu"],
            f"{target.model.model if target.model else 'the'} datasheet's {peak['dtype']} peak",
        )
        return [replace(finding, reason=f"{rate}, MFU {finding.reason}", details=details)]
    note = " (provisional: measured while busy)" if peak["source"] == "provisional" else ""
    return [
        Finding(
            "training",
            target.label,
            what,
            INFO,
            f"{rate}, MFU {achieved / peak['value']:.0%} of the measured {peak['dtype']} peak "
            f"{peak['value'] / 1e9:,.0f} GFLOP/s{note}; no datasheet to judge against",
            achieved / 1e9,
            "GFLOP/s",
            peak["value"] / 1e9,
            f"measured {peak['measured_at']}",
            details,
        )
    ]


def _size_text(nbytes: int) -> str:
    return f"{nbytes // (1 << 30)} GiB" if nbytes >= 1 << 30 else f"{nbytes // MIB} MiB"
