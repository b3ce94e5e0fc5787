"""NVML's link error counters per GPU: NVLink replay, recovery and CRC counts, PCIe replays.

Beside :mod:`workloads.hardware.nvml` (the facts and samples under load) because these are
read once, by the ``errors`` check and by ``workloads health``, never sampled. Every query
goes through NVML's own names: ``nvmlDeviceGetNvLinkErrorCounter(handle, link, counter)``
with the counter one of pynvml's ``NVML_NVLINK_ERROR_DL_REPLAY``, ``_DL_RECOVERY``,
``_DL_CRC_FLIT``, ``_DL_CRC_DATA`` (``nvmlNvLinkErrorCounter_t`` in nvml.h), and
``nvmlDeviceGetPcieReplayCounter(handle)``. Both count since the driver loaded or the
counters were last reset. Only links that are up are read (NVML counts nothing useful on a
link that is down, and the NVLink row of the ``nvml`` check names those); a counter the
GPU does not support reads as None, never as zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from workloads.hardware.nvml import read_or_none as _read

# Our names for the counters, each with the pynvml constant that selects it.
COUNTERS = (
    ("replay", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("recovery", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("crc_flit", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("crc_data", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
)


@dataclass(frozen=True)
class LinkErrors:
    """One active NVLink's error counters (None: not supported on this GPU or driver)."""

    link: int
    counts: dict[str, int | None]

    def total(self) -> int:
        return sum(v for v in self.counts.values() if v)


@dataclass(frozen=True)
class GpuErrors:
    """A GPU's link error counters, with its PCI bus address to match kernel-log lines."""

    index: int
    name: str
    pci: str | None  # sysfs form, "0000:3b:00.0"
    nvlinks: tuple[LinkErrors, ...]
    pcie_replays: int | None




def sysfs_bdf(bus_id: object) -> str | None:
    """NVML's bus ID (``00000000:3B:00.0``, bytes in older pynvml) as sysfs names it."""
    text = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    parts = text.strip().lower().split(":")
    if len(parts) != 3:
        return None
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    except ValueError:
        return None


def read_gpu(nvml: Any, index: int) -> GpuErrors:
    """The error counters of GPU ``index`` (NVML numbering)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    name = _read(nvml, "nvmlDeviceGetName", handle)
    pci = _read(nvml, "nvmlDeviceGetPciInfo", handle)
    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):  # nvml.h's bound, not a board's count
        if not _read(nvml, "nvmlDeviceGetNvLinkState", handle, link):
            continue  # down, or no such link
        counts = {
            key: _read(nvml, "nvmlDeviceGetNvLinkErrorCounter", handle, link, getattr(pynvml, name))
            for key, name in COUNTERS
            if hasattr(pynvml, name)
        }
        links.append(LinkErrors(link, counts))
    replays = _read(nvml, "nvmlDeviceGetPcieReplayCounter", handle)
    return GpuErrors(
        index=index,
        name=(name.decode() if isinstance(name, bytes) else str(name)) if name else f"GPU {index}",
        pci=sysfs_bdf(pci.busId) if pci is not None and hasattr(pci, "busId") else None,
        nvlinks=tuple(links),
        pcie_replays=None if replays is None else int(replays),
    )


def read_all(nvml: Any) -> list[GpuErrors]:
    """Every GPU's counters; an empty list when NVML counts none."""
    count = _read(nvml, "nvmlDeviceGetCount")
    return [read_gpu(nvml, i) for i in range(int(count or 0))]
