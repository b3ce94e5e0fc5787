"""Which GPU is which: framework devices to NVML indices, and NVML's PCI device IDs to the table.

A framework numbers the GPUs it sees (after ``CUDA_VISIBLE_DEVICES``); NVML numbers
all of them in PCI order. The reference table is keyed by PCI device ID, which
only NVML tells. These functions are the bridge, pure where they can be.
"""

from __future__ import annotations

import os
from typing import Any

from workloads.hardware.reference import GpuModel, load


def visible_nvml_indices(visible: str | None, nvml_gpus: list[dict[str, Any]]) -> list[int]:
    """NVML indices of the GPUs a framework sees, in the framework's order.

    ``visible`` is ``CUDA_VISIBLE_DEVICES``: unset means all, in NVML (PCI) order;
    otherwise a comma list of indices or UUIDs (a UUID prefix is enough, as CUDA
    accepts). An entry that names no GPU ends the list, as it does for CUDA.
    """
    if visible is None:
        return [g["index"] for g in nvml_gpus]
    chosen: list[int] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            break
        if entry.isdigit():
            index = int(entry)
            if not any(g["index"] == index for g in nvml_gpus):
                break
            chosen.append(index)
            continue
        matches = [g["index"] for g in nvml_gpus if str(g.get("uuid", "")).startswith(entry)]
        if len(matches) != 1:
            break
        chosen.append(matches[0])
    return chosen


def model_of(pci_device_id: int | None) -> GpuModel | None:
    return load().model_for(pci_device_id)


def datasheet_matmul(device: str, dtype: str, math: str) -> tuple[float, str, str] | None:
    """``(FLOP/s, dtype, document)`` of the datasheet peak for a GPU named ``device``; else None.

    ``math`` is the dtype the matmuls really run in (TF32 for float32 where enabled);
    a model without that figure falls back to ``dtype``'s. Devices are matched to
    NVML by name; a CPU, or a GPU not in the table, gives None.
    """
    from workloads.envinfo import nvml_gpus

    _, gpus = nvml_gpus()
    for gpu in gpus:
        if gpu["name"] != device:
            continue
        model = model_of(gpu.get("pci_device_id"))
        if model is None:
            return None
        for candidate in (math, dtype):
            figure = model.matmul_tflops.get(candidate)
            if figure is not None:
                document = f"{model.model}: {load().cite(figure.source)}"
                return figure.value * 1e12, candidate, document
        return None
    return None


def cuda_visible() -> str | None:
    return os.environ.get("CUDA_VISIBLE_DEVICES")
