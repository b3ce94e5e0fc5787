"""The soak: every GPU computes matmuls with a known answer for minutes; every product is checked.

The kernels' soak (``golden``) multiplies integer-valued matrices whose product is exact in
float32 and bfloat16, over several shapes, and each product's checksum is compared with the
exact one worked out on the host: a one-GPU host, or GPUs all wrong the same way, fail too.
A soak without a golden answer (``SoakRun.expected`` empty) is judged as below.

The products touch under a GiB, so each GPU also holds ``memfill.SOAK_MEMORY_FRACTION`` of
its free memory (NVML's figure, or the backend's) written with a seeded pattern and read back
on every iteration, each read-back against the host's closed-form sum (``memfill``): the
``memory`` row states the bytes covered and their share of the GPU.

Speed checks pass a GPU that computes wrong answers fast. Here each device multiplies the
same two seeded matrices again and again for ``--soak SECONDS`` (Imbue's stress test runs
300 s and compares results across GPUs), and each product's checksum (its bits, exactly)
is compared

* with that device's first product: the inputs never change, so a later product that
  differs is silent data corruption on that device (``fail``, naming the iteration);
* with its siblings' (devices of the same model run the same kernels on the same bits):
  a device whose products differ from the others' is named; where two disagree and there
  is no third to side with, both are.

While it runs, the battery's NVML sampler keeps reading clocks, power and temperature;
a clock that sags from the soak's first fifth to its last as the card heats is a finding
(``soak_clocks`` in ``reference.yaml``).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable

from workloads.accept import memfill
from workloads.accept.checks import Sizes, Target
from workloads.accept.kernels import Kernels, SoakRun
from workloads.accept.verdicts import FAIL, PASS, SKIP, WARN, Finding
from workloads.hardware.nvml import GpuWatch
from workloads.hardware.reference import Reference, Threshold


def check_soak(
    kernels: Kernels,
    targets: list[Target],
    size: Sizes,
    seconds: float,
    reference: Reference,
    tick: Callable[[str], None],
    now: Callable[[], float] | None = None,
    memory: Callable[[int], tuple[int, int] | None] | None = None,
) -> list[Finding]:
    """Run the soak on every target at once; findings per device, then the clocks under it.

    ``now`` reads the NVML sampler's clock (``Watcher.now``), to know which samples fell
    inside the soak; without it (no NVML) there is no clock row. ``memory`` reads a GPU's
    (free, total) bytes from NVML by its NVML index (``Watcher.memory_info``); without it,
    or where it has no answer, the backend's own memory stats size the memory coverage.
    """
    devices = [t.device for t in targets]
    if not devices or seconds <= 0:
        return [Finding("soak", "host", "results", SKIP, "no soak asked for (--soak SECONDS)")]
    tick(f"{len(devices)} device(s), {seconds:,.0f} s")
    begin = now() if now else None
    plans = {t.label: memory_plan(kernels, t, memory) for t in targets}
    run = kernels.soak_checksums(devices, size.soak_matrix, seconds, plans)
    end = now() if now else None
    groups = {t.label: (t.model.model if t.model else t.device.name) for t in targets}
    findings = results(run, groups)
    findings += [memory_result(t.label, plans[t.label], run) for t in targets]
    if begin is not None and end is not None:
        threshold = reference.thresholds["soak_clocks"]
        for target in targets:
            if target.watch is not None:
                findings.append(clock_sag(target.label, target.watch, begin, end, threshold))
    return findings


def memory_plan(
    kernels: Kernels, target: Target, memory: Callable[[int], tuple[int, int] | None] | None
) -> memfill.Plan:
    """How much of the device the soak covers: the free memory NVML reports, or the backend's.

    Where both answer, the larger free figure: a framework that reserved a pool at start (JAX
    preallocates most of a GPU) holds memory NVML counts as used but the soak can fill.
    """
    if target.device.kind != "GPU":
        return memfill.plan_for(target.device.kind, None, None, "")
    readings = []
    if memory is not None and target.watch is not None:
        nvml = memory(target.watch.facts.index)
        if nvml is not None:
            readings.append((nvml, "NVML"))
    stats = kernels.memory_stats(target.device)
    if stats is not None:
        readings.append((stats, "the backend's memory stats"))
    if not readings:
        return memfill.plan_for(target.device.kind, None, None, "")
    (free, _), source = max(readings, key=lambda r: r[0][0])
    total = readings[0][0][1]  # NVML's total where it answered: the whole device
    return memfill.plan_for(target.device.kind, free, total, source)


def memory_result(label: str, plan: memfill.Plan, run: SoakRun) -> Finding:
    """One device's memory coverage: every pass's read-back against the host's closed form.

    Fails closed: a device with no coverage record, or one that finished no pass, fails.
    """
    fill = run.memory.get(label)
    if fill is None:
        return Finding("soak", label, "memory", FAIL, "the soak returned no memory coverage "
                       "for this device: its memory was not checked; run the soak again")
    whole = plan.total or 0
    share = f" of {_bytes(whole)} ({100 * fill.filled_bytes / whole:.0f} %)" if whole else ""
    covered = f"{_bytes(fill.filled_bytes)}{share}"
    details = {"filled_bytes": fill.filled_bytes, "planned_bytes": plan.nbytes,
               "free_bytes": plan.free, "total_bytes": plan.total, "source": plan.source,
               "fraction_of_free": memfill.SOAK_MEMORY_FRACTION, "passes": len(fill.sums)}
    if not fill.sums:
        why = f" ({fill.short})" if fill.short else ""
        return Finding("soak", label, "memory", FAIL, f"no memory pass finished{why}: the "
                       f"device's memory was not checked; reset the GPU and run again",
                       details=details)
    wrong = [p for p, got in enumerate(fill.sums)  # a pass without its seed is wrong too
             if p >= len(fill.seeds) or got != memfill.expected(fill.seeds[p], fill.elements)]
    details["mismatches"] = len(wrong)
    if wrong:
        first = wrong[0]
        return Finding("soak", label, "memory", FAIL, f"memory read back wrong: {len(wrong)} of "
                       f"{len(fill.sums)} passes over {covered} differ from the pattern written "
                       f"(first: pass {first + 1}); a stuck or "
                       "flipping bit: drain the node, check ECC and row remapping (nvidia-smi -q "
                       "-d ECC,ROW_REMAPPER), replace the GPU (RMA) if it repeats", details=details)
    text = (f"memory: {covered} written and read back {len(fill.sums)} times, every read-back "
            f"equal to the host's sum")
    if fill.short:
        return Finding("soak", label, "memory", WARN, f"{text}; only this much could be "
                       f"allocated of the {_bytes(plan.nbytes)} asked ({plan.source}): "
                       f"{fill.short}; free the GPU (other processes) and run again",
                       details=details)
    if not plan.sized:
        return Finding("soak", label, "memory", WARN, f"{text}; {plan.source}, so the share "
                       "checked is unknown: run with NVML (the driver's libnvidia-ml)",
                       details=details)
    return Finding("soak", label, "memory", PASS, f"{text} ({plan.source})", details=details)


def _bytes(count: int) -> str:
    """GiB with one decimal from 1 GiB up (the row's scale), else MiB."""
    if count >= 1 << 30:
        return f"{count / (1 << 30):,.1f} GiB"
    return f"{count / (1 << 20):,.1f} MiB"


def golden_results(run: SoakRun) -> list[Finding]:
    """Each device's products against the exact answer worked out on the host (``golden``).

    This needs no second GPU and no agreement: a one-GPU host that computes wrong fails, and
    so do GPUs that are all wrong the same way.
    """
    findings = []
    kinds = sorted(set(run.cases))
    touched = run.touched_bytes / (1 << 30)
    for label, sums in run.checksums.items():
        details = {"iterations": len(sums), "cases": kinds, "touched_gib": round(touched, 3)}
        if not sums:
            findings.append(Finding("soak", label, "results", FAIL, f"no product finished in "
                                    f"{run.seconds:,.0f} s: the device did not compute; reset "
                                    "it and run again", details=details))
            continue
        wrong = [i for i, (got, want) in enumerate(zip(sums, run.expected, strict=False))
                 if got != want]
        details["mismatches"] = len(wrong)
        if wrong:
            first = wrong[0]
            findings.append(Finding(
                "soak", label, "results", FAIL, f"wrong answers: {len(wrong)} of {len(sums)} "
                f"products differ from the exact product (first: iteration {first + 1}, "
                f"{run.cases[first]}); integer inputs make every product exact, so this is "
                "silent data corruption: drain the node, reset the GPU, replace it (RMA) if it "
                "repeats", details=details))
            continue
        findings.append(Finding(
            "soak", label, "results", PASS, f"{len(sums)} products in {run.seconds:,.0f} s "
            f"({', '.join(kinds)}), every one equal to the exact answer; each touches "
            f"{touched:,.2f} GiB of device memory", details=details))
    return findings


def results(run: SoakRun, groups: dict[str, str]) -> list[Finding]:
    """Each device's products against its own first and against its siblings'.

    With a golden answer (``run.expected``) the products are judged against it instead.
    """
    if run.expected:
        return golden_results(run)
    findings = []
    sibling_verdicts = _against_siblings(run, groups)
    for label, sums in run.checksums.items():
        what = f"{run.size}² float32 matmul × {len(sums)} in {run.seconds:,.0f} s"
        if not sums:
            findings.append(
                Finding(
                    "soak",
                    label,
                    "results",
                    FAIL,
                    f"no product finished in {run.seconds:,.0f} s: the device "
                    "did not compute; reset it and run again",
                )
            )
            continue
        changed = [i for i, value in enumerate(sums) if value != sums[0]]
        details = {"iterations": len(sums), "mismatches": len(changed), "first": sums[0]}
        if changed:
            findings.append(
                Finding(
                    "soak",
                    label,
                    "results",
                    FAIL,
                    f"silent data corruption: {len(changed)} of {len(sums)} products differ from "
                    f"the first (iteration {changed[0] + 1} first), with the same inputs; "
                    "drain the node and replace the GPU (RMA) if it repeats after a reset",
                    details=details,
                )
            )
            continue
        odd = sibling_verdicts.get(label)
        if odd:
            findings.append(Finding("soak", label, "results", FAIL, odd, details=details))
            continue
        findings.append(
            Finding(
                "soak",
                label,
                "results",
                PASS,
                f"{what}: every product identical to the first, and to its siblings'",
                details=details,
            )
        )
    return findings


def _against_siblings(run: SoakRun, groups: dict[str, str]) -> dict[str, str]:
    """Devices whose first product differs from their siblings' (same model), with why."""
    odd: dict[str, str] = {}
    by_group: dict[str, list[str]] = {}
    for label, sums in run.checksums.items():
        if sums:
            by_group.setdefault(groups.get(label, label), []).append(label)
    for labels in by_group.values():
        if len(labels) < 2:
            continue
        counts = Counter(run.checksums[label][0] for label in labels)
        common, times = counts.most_common(1)[0]
        if times * 2 > len(labels):  # a majority agrees: the others are wrong
            for label in labels:
                if run.checksums[label][0] != common:
                    odd[label] = (
                        f"its product differs from that of {times} of its {len(labels) - 1} "
                        "siblings (same model, same inputs): silent data corruption on this "
                        "device; drain it, reset the GPU, replace it (RMA) if it repeats"
                    )
        elif len(counts) > 1:
            for label in labels:
                odd[label] = (
                    f"the products of {', '.join(labels)} disagree and no majority agrees "
                    "(same model, same inputs): one of them computes wrong; run the soak on "
                    "each alone, or with a third GPU of the model"
                )
    return odd


def clock_sag(
    label: str, watch: GpuWatch, begin: float, end: float, threshold: Threshold
) -> Finding:
    """The SM clock in the soak's last fifth against its first fifth, with the heat beside."""
    inside = [s for s in watch.loaded() if begin <= s.time_s <= end and s.sm_clock_mhz]
    fifth = (end - begin) / 5
    first = [s for s in inside if s.time_s <= begin + fifth]
    last = [s for s in inside if s.time_s >= end - fifth]
    if not first or not last:
        return Finding(
            "soak",
            label,
            "clock under load",
            SKIP,
            "too few NVML samples under load during the soak to compare its start "
            "and end (run a longer soak)",
        )
    early = statistics.median(s.sm_clock_mhz for s in first if s.sm_clock_mhz)
    late = statistics.median(s.sm_clock_mhz for s in last if s.sm_clock_mhz)
    temps_early = [s.temperature_c for s in first if s.temperature_c is not None]
    temps_late = [s.temperature_c for s in last if s.temperature_c is not None]
    heat = f"; {max(temps_early)} → {max(temps_late)} °C" if temps_early and temps_late else ""
    share = late / early
    text = f"median {early:,.0f} MHz in the first fifth, {late:,.0f} MHz in the last{heat}"
    details = {"first_mhz": early, "last_mhz": late, "samples": len(inside)}
    if share < threshold.fail_below:
        verdict, reason = (
            FAIL,
            f"{text}: the clock fell {1 - share:.0%} under load; check "
            "cooling, the power supply and the throttle row",
        )
    elif share < threshold.warn_below:
        verdict, reason = (
            WARN,
            f"{text}: the clock sagged {1 - share:.0%} as the card heated; "
            "check airflow and the fan or coolant settings",
        )
    else:
        verdict, reason = PASS, text
    return Finding(
        "soak",
        label,
        "clock under load",
        verdict,
        reason,
        late,
        "MHz",
        early,
        "the soak's first fifth",
        details,
    )
