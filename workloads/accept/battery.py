"""The battery runner: which checks run, in which order, with progress, and NVML watching.

Order matters: DCGM's diagnostic first (it wants the GPUs before a framework holds
them), then the framework starts and the measured checks run while a thread samples
NVML, then the NVML rules judge what was seen under that load.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads import busy
from workloads.accept import checks, dcgm, errors, links, p2p, soak, verdicts
from workloads.accept.checks import Sizes, Target
from workloads.accept.verdicts import SKIP, Finding
from workloads.hardware import identify
from workloads.hardware.nvml import GpuWatch, Watcher, open_nvml
from workloads.hardware.reference import Reference

CHECKS = (
    "matmul",
    "membw",
    "transfer",
    "allreduce",
    "p2p",
    "training",
    "nvml",
    "errors",
    "dcgm",
    "soak",
)
MEASURED = ("matmul", "membw", "transfer", "allreduce", "p2p", "training", "soak")
# Not in the default battery: it runs only for as long as it is asked to (--soak, deep).
ON_REQUEST = ("soak",)


@dataclass
class Outcome:
    """Everything the output needs: findings, what ran where, and how long each check took."""

    findings: list[Finding]
    backend: str | None
    devices: list[dict[str, Any]]
    sizes: Sizes
    durations_s: dict[str, float] = field(default_factory=dict)
    unknown_gpus: list[str] = field(default_factory=list)
    others_cpu_share: float | None = None


class Progress:
    """Rich progress bars on a terminal; one plain line per step on stderr elsewhere."""

    def __init__(self, enabled: bool) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self._bars: Any = None

    @contextmanager
    def running(self) -> Iterator[Progress]:
        if not self.live:
            yield self
            return
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn("{task.description:<10}"),
            BarColumn(),
            TextColumn("{task.fields[step]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        ) as bars:
            self._bars = bars
            yield self
        self._bars = None

    @contextmanager
    def check(self, name: str, total: int) -> Iterator[Callable[[str], None]]:
        """A bar for ``name`` with ``total`` steps; yields ``tick(step text)``."""
        start = time.perf_counter()
        task = self._bars.add_task(name, total=max(1, total), step="") if self._bars else None

        def tick(step: str) -> None:
            if self._bars is not None:
                if self._bars.tasks[task].fields.get("step"):
                    self._bars.advance(task)
                self._bars.update(task, step=step)
            else:
                print(f"accept: {name} {step}", file=sys.stderr, flush=True)

        yield tick
        if self._bars is not None:
            self._bars.update(
                task, completed=max(1, total), step=f"{time.perf_counter() - start:.1f} s"
            )


def run(
    selected: list[str],
    quick: bool,
    level: int,
    backend: str,
    reference: Reference,
    progress: Progress,
    nvml: Any = None,
    kernels: Any = None,
    soak_seconds: float = 0.0,
    kernel_log: Path | None = None,
) -> Outcome:
    """Run the ``selected`` checks; returns their findings.

    ``nvml`` and ``kernels`` default to the real ones (pynvml, the backend's layer);
    tests pass recorded stand-ins to drive the GPU path on a machine without GPUs.
    """
    findings: list[Finding] = []
    durations: dict[str, float] = {}
    nvml = open_nvml(nvml)
    try:
        if "dcgm" in selected:
            start = time.perf_counter()
            with progress.running(), progress.check("dcgm", 1) as tick:
                tick(f"dcgmi diag -r {level}")
                findings += dcgm.run_diag(level)
            durations["dcgm"] = time.perf_counter() - start
        watcher = Watcher(nvml) if nvml is not None and nvml.nvmlDeviceGetCount() else None
        measured = [c for c in selected if c in MEASURED]
        probe = busy.Probe(gpu_others=lambda: None)
        token = probe.start()
        if measured and kernels is None:
            from workloads.accept.backends import load_kernels

            on_gpu_guess = watcher is not None
            kernels = load_kernels(backend, checks.sizes(on_gpu_guess, quick).cpu_devices)
        targets = _targets(kernels if measured else None, watcher, reference)
        on_gpu = bool(targets) and targets[0].device.kind == "GPU"
        size = checks.sizes(on_gpu, quick)
        watching = watcher.running() if watcher is not None else nullcontext()
        with watching, progress.running():
            if watcher is not None:
                watcher.sample_once()
            for name in measured:
                assert kernels is not None
                start = time.perf_counter()
                with progress.check(name, _steps(name, kernels, targets, size)) as tick:
                    if name == "soak":
                        findings += soak.check_soak(
                            kernels,
                            targets,
                            size,
                            soak_seconds,
                            reference,
                            tick,
                            watcher.now if watcher is not None else None,
                            watcher.memory_info if watcher is not None else None,
                        )
                    else:
                        findings += _measure(name, kernels, targets, size, reference, tick)
                durations[name] = time.perf_counter() - start
        others = busy.others_share(token[0], busy.cpu_times())
        if "nvml" in selected:
            findings += nvml_findings(watcher, targets, reference)
        if "errors" in selected:
            labels = {t.watch.facts.index: t.label for t in targets if t.watch is not None}
            findings += errors.collect(
                nvml if watcher is not None else None, labels, kernel_log_path=kernel_log
            )
        if measured:
            findings.append(verdicts.busy_host(others, reference.busy_share))
        groups = {t.label: (t.model.model if t.model else t.device.name) for t in targets}
        findings = verdicts.compare_siblings(findings, reference.thresholds["siblings"], groups)
        return Outcome(
            findings=findings,
            backend=kernels.backend if measured and kernels is not None else None,
            devices=[_device_record(t) for t in targets],
            sizes=size,
            durations_s=durations,
            unknown_gpus=[
                _unknown(t) for t in targets if t.device.kind == "GPU" and t.model is None
            ],
            others_cpu_share=others,
        )
    finally:
        if nvml is not None:
            nvml.nvmlShutdown()


def _measure(
    name: str,
    kernels: Any,
    targets: list[Target],
    size: Sizes,
    reference: Reference,
    tick: Callable[[str], None],
) -> list[Finding]:
    if name == "matmul":
        return checks.check_matmul(kernels, targets, size, reference, tick)
    if name == "membw":
        return checks.check_membw(kernels, targets, size, reference, tick)
    if name == "transfer":
        return checks.check_transfer(kernels, targets, size, reference, tick)
    if name == "allreduce":
        return checks.check_allreduce(kernels, targets, size, reference, tick)
    if name == "p2p":
        return p2p.check_p2p(kernels, targets, size, reference, tick)
    return checks.check_training(targets, size, reference, tick)


def _steps(name: str, kernels: Any, targets: list[Target], size: Sizes) -> int:
    if name == "p2p":
        count = len(kernels.peer_devices())
        return max(1, count * (count - 1))
    return {
        "matmul": sum(len(checks.matmul_dtypes(t)) for t in targets),
        "membw": len(targets),
        "transfer": 2 * len(targets),
        "allreduce": len(size.allreduce_bytes),
        "training": 1,
        "soak": 1,
    }[name]


def _targets(kernels: Any, watcher: Watcher | None, reference: Reference) -> list[Target]:
    """The framework's devices, each with its NVML facts and reference model where known."""
    if kernels is None:  # only NVML/DCGM checks: the GPUs NVML sees
        if watcher is None:
            return []
        from workloads.accept.kernels import Device

        return [
            Target(
                Device("GPU", w.facts.index, w.facts.name, None),
                w,
                reference.model_for(w.facts.pci_device_id),
                watcher.topology,
            )
            for w in watcher.gpus
        ]
    devices = kernels.devices()
    if watcher is None or devices[0].kind != "GPU":
        return [Target(d) for d in devices]
    listing = [
        {"index": w.facts.index, "uuid": w.facts.uuid or "", "name": w.facts.name}
        for w in watcher.gpus
    ]
    indices = identify.visible_nvml_indices(identify.cuda_visible(), listing)
    targets = []
    for position, device in enumerate(devices):
        watch = _match(device, position, indices, watcher.gpus)
        model = reference.model_for(watch.facts.pci_device_id) if watch else None
        targets.append(Target(device, watch, model, watcher.topology))
    return targets


def _match(device: Any, position: int, indices: list[int], gpus: list[GpuWatch]) -> GpuWatch | None:
    """The NVML GPU behind a framework device: by CUDA_VISIBLE_DEVICES order, checked by name."""
    if position < len(indices):
        watch = gpus[indices[position]]
        if watch.facts.name == device.name:
            return watch
    named = [w for w in gpus if w.facts.name == device.name]
    return named[0] if len({w.facts.pci_device_id for w in named}) == 1 else None


def nvml_findings(
    watcher: Watcher | None, targets: list[Target], reference: Reference
) -> list[Finding]:
    """The NVML rules over what the watcher saw, per GPU."""
    if watcher is None:
        return [
            Finding(
                "nvml",
                "host",
                "readings",
                SKIP,
                "no NVIDIA GPU driver visible (NVML): nothing to read",
            )
        ]
    models = {t.watch.facts.index: t.model for t in targets if t.watch is not None}
    findings: list[Finding] = []
    for watch in watcher.gpus:
        label = next(
            (t.label for t in targets if t.watch is watch), f"NVML GPU {watch.facts.index}"
        )
        model = models.get(watch.facts.index, reference.model_for(watch.facts.pci_device_id))
        findings.append(verdicts.pcie_link(label, watch))
        findings.append(verdicts.clocks(label, watch, reference.thresholds["clocks"]))
        findings.append(verdicts.throttle(label, watch))
        findings.append(verdicts.memory_errors(label, watch))
        node = watcher.topology.node(watch.facts.index)
        if node is not None:
            summary = links.summarise(node, watcher.topology)
            findings += links.findings(label, summary, model.nvlink if model else None)
    return findings


def _device_record(target: Target) -> dict[str, Any]:
    facts = target.watch.facts if target.watch else None
    return {
        "label": target.label,
        "name": target.device.name,
        "model": target.model.model if target.model else None,
        "nvml_index": facts.index if facts else None,
        "pci_device_id": f"{facts.pci_device_id:#06x}" if facts and facts.pci_device_id else None,
        "uuid": facts.uuid if facts else None,
    }


def _unknown(target: Target) -> str:
    facts = target.watch.facts if target.watch else None
    pci = (
        f"PCI 10de:{facts.pci_device_id:04x}" if facts and facts.pci_device_id else "PCI ID unknown"
    )
    return f"{target.label} {target.device.name} ({pci})"
