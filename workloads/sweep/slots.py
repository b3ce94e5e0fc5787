"""Device slots: which device each concurrent run gets, and the environment that binds it.

A slot is one place to run: GPU *d*, share *k* of ``--per-device K``, or one of K
CPU workers. The scheduler keeps free slots in a queue and hands one to each run,
so a device never runs more than K runs at once, whatever order runs finish in.
The binding is ``CUDA_VISIBLE_DEVICES`` in the run's environment, set before the
process starts: the framework in it sees exactly one GPU (or, for CPU workers,
none) and cannot allocate memory anywhere else, the two failures of seed 000.

GPUs are named by NVML UUID when the sweep itself picked them: CUDA numbers GPUs
fastest-first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, NVML by PCI bus, so the
index NVML reports can be another GPU to CUDA; the UUID cannot.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from workloads.errors import WorkloadError


@dataclass(frozen=True)
class Slot:
    """One concurrent run's place: a device (or the CPU) and its environment."""

    index: int
    label: str  # "GPU 0", "CPU", "inherited"
    visible: str | None  # CUDA_VISIBLE_DEVICES for the run; "" hides all GPUs; None inherits
    shared_by: int  # runs sharing this device at once
    cpu_threads: int | None = None  # threads per CPU worker, so K workers do not oversubscribe

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """The run's environment: ``base`` plus the device binding of this slot."""
        env = dict(base)
        env["WORKLOADS_SWEEP_SLOT"] = str(self.index)
        env["WORKLOADS_SWEEP_DEVICE"] = self.label
        if self.visible is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible
        if self.visible and self.shared_by > 1:
            # Several processes on one GPU: allocate on demand, never up front.
            env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
            env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        if self.cpu_threads is not None:
            for name in ("TF_NUM_INTRAOP_THREADS", "OMP_NUM_THREADS"):
                env.setdefault(name, str(self.cpu_threads))
        return env


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """``(label, CUDA_VISIBLE_DEVICES entry)`` for every GPU this process may use.

    An existing ``CUDA_VISIBLE_DEVICES`` (set by a user, a container or SLURM) is
    the truth: its entries are used verbatim, numbered 0.. as CUDA numbers them.
    """
    environ = os.environ if environ is None else environ
    given = environ.get("CUDA_VISIBLE_DEVICES")
    if given is not None:
        entries = [e.strip() for e in given.split(",") if e.strip()]
        # CUDA stops at the first invalid entry; "-1" is the usual way to hide all.
        valid = []
        for entry in entries:
            if entry.startswith("-"):
                break
            valid.append(entry)
        return [(f"GPU {i}", entry) for i, entry in enumerate(valid)]
    from workloads.envinfo import nvml_gpus

    _, gpus = nvml_gpus()
    return [(f"GPU {g['index']}", str(g["uuid"])) for g in gpus]


def parse_devices(text: str) -> list[int] | str:
    """``--devices``: 'all', 'cpu', or comma-separated GPU indexes such as '0,1,3'."""
    text = text.strip().lower()
    if text in ("all", "cpu"):
        return text
    try:
        indexes = [int(part) for part in text.split(",")]
    except ValueError:
        raise WorkloadError(
            f"--devices {text!r} is not a list of GPU indexes", "write e.g. --devices 0,1 or cpu"
        ) from None
    if any(i < 0 for i in indexes) or len(set(indexes)) != len(indexes):
        raise WorkloadError(
            f"--devices {text!r} has a negative or repeated index", "list each GPU once, e.g. 0,1"
        )
    return indexes


def build_slots(
    devices: list[int] | str,
    per_device: int,
    gpus: list[tuple[str, str]],
    cpu_count: int | None = None,
) -> list[Slot]:
    """All slots, round-robin over devices, so the first N slots span N devices."""
    if devices == "cpu" or (devices == "all" and not gpus):
        cores = cpu_count or len(os.sched_getaffinity(0))
        threads = max(1, cores // per_device)
        return [Slot(k, "CPU", "", per_device, cpu_threads=threads) for k in range(per_device)]
    if devices == "all":
        chosen = gpus
    else:
        assert isinstance(devices, list)
        if not gpus:
            raise WorkloadError(
                f"--devices {','.join(map(str, devices))} given but no GPU is visible",
                "use --devices cpu, or check the driver with 'workloads check'",
            )
        bad = [i for i in devices if i >= len(gpus)]
        if bad:
            raise WorkloadError(
                f"GPU {bad[0]} does not exist: {len(gpus)} visible (0..{len(gpus) - 1})",
                "pick indexes from 'nvidia-smi -L' (counted within CUDA_VISIBLE_DEVICES if set)",
            )
        chosen = [gpus[i] for i in devices]
    return [
        Slot(k * len(chosen) + d, label, visible, per_device)
        for k in range(per_device)
        for d, (label, visible) in enumerate(chosen)
    ]


def describe(slots: list[Slot]) -> str:
    """'4 workers: GPU 0 x2, GPU 1 x2' for the sweep's first line."""
    counts: dict[str, int] = {}
    for slot in slots:
        counts[slot.label] = counts.get(slot.label, 0) + 1
    parts = [f"{label} x{n}" if n > 1 else label for label, n in counts.items()]
    noun = "worker" if len(slots) == 1 else "workers"
    text = f"{len(slots)} {noun}: {', '.join(parts)}"
    if slots and slots[0].visible == "":
        text += f" (no GPU: CUDA_VISIBLE_DEVICES='' and {slots[0].cpu_threads} threads each)"
    return text
