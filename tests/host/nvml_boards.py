"""NVML readings of whole boards, built from NVIDIA's own definitions rather than typed.

What :class:`tests.host.fake_nvml.FakeNvml` replays, for the battery's tests:

* every enum and bit is nvidia-ml-py's named constant: each NVLink is recorded as the
  ``nvmlNvlinkVersion_t`` its GPU reports (``NVML_NVLINK_VERSION_3_1`` on an A100: hwloc
  issue #658 "A100 returns 5"; ``NVML_NVLINK_VERSION_4_0`` on an H100 or H200;
  ``NVML_NVLINK_VERSION_5_0`` on a B200), a link that is down as
  ``NVML_NVLINK_VERSION_INVALID``; clock-event reasons are ``nvmlClocksEventReason*`` bits;
* the PCI device ID is looked up by its product name in the PCI ID repository's file
  (``/usr/share/misc/pci.ids``, Debian's ``pci.ids`` package that the test setup
  installs), so the ID is the vendor's and not one the table could share a typo with;
* units are ``nvml.h``'s: power in milliwatts, clocks in MHz, temperature in °C.

The remaining figures (clocks, power limits, link widths) are each board's as its
``nvidia-smi -q`` reports them (the H200's: ``shared/reference/gpu-h200/nvidia-smi-q.txt``).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pynvml

PCI_IDS = Path("/usr/share/misc/pci.ids")


def pci_device_id(product: str) -> int:
    """The NVIDIA device ID whose bracketed product name in pci.ids is ``product``."""
    inside = False
    for line in PCI_IDS.read_text(errors="replace").splitlines():
        if line and not line.startswith(("\t", "#")):
            inside = line.startswith("10de  ")
            continue
        match = re.fullmatch(r"\t([0-9a-f]{4})  .*\[(.*)\]", line)
        if inside and match and match[2] == product:
            return int(match[1], 16)
    raise LookupError(f"pci.ids names no NVIDIA device [{product}]")


@dataclass(frozen=True)
class Board:
    """One GPU model as NVML describes it."""

    nvml_name: str  # nvmlDeviceGetName
    pci_product: str  # the bracketed name in pci.ids
    nvlink_version: int  # nvmlNvlinkVersion_t of each link
    links: int
    pcie_generation: int
    sm_max_mhz: int
    mem_max_mhz: int
    power_limit_mw: int
    memory_bytes: int


A100_SXM4_80GB = Board(
    "NVIDIA A100-SXM4-80GB", "A100 SXM4 80GB", pynvml.NVML_NVLINK_VERSION_3_1, 12, 4,
    1410, 1593, 400_000, 85_899_345_920,
)
H100_SXM5_80GB = Board(
    "NVIDIA H100 80GB HBM3", "H100 SXM5 80GB", pynvml.NVML_NVLINK_VERSION_4_0, 18, 5,
    1980, 2619, 700_000, 85_520_809_984,
)
H200_SXM = Board(
    "NVIDIA H200", "H200 SXM 141GB", pynvml.NVML_NVLINK_VERSION_4_0, 18, 5,
    1980, 3201, 700_000, 150_754_820_096,
)
B200 = Board(
    "NVIDIA B200", "B200", pynvml.NVML_NVLINK_VERSION_5_0, 18, 6,
    1965, 3996, 1_000_000, 192_000_000_000,
)

IDLE = pynvml.nvmlClocksEventReasonGpuIdle
POWER_CAP = pynvml.nvmlClocksEventReasonSwPowerCap


def gpu(board: Board, index: int, about: str = "healthy") -> dict[str, Any]:
    """One healthy GPU of ``board``: an idle reading (link at Gen1), then two under load."""
    loaded_clock = int(board.sm_max_mhz * 0.89)
    idle = {
        "sm": 0, "mem": 0, "used": 532_676_608, "power_mw": board.power_limit_mw // 10,
        "temp": 31, "sm_clock": 345, "mem_clock": board.mem_max_mhz, "reasons": IDLE,
        "pcie_gen": 1, "pcie_width": 16,
    }
    loaded = {
        "sm": 99, "mem": 44, "used": 12_884_901_888, "power_mw": board.power_limit_mw * 94 // 100,
        "temp": 62, "sm_clock": loaded_clock, "mem_clock": board.mem_max_mhz,
        "reasons": POWER_CAP, "pcie_gen": board.pcie_generation, "pcie_width": 16,
    }
    return {
        "about": about,
        "name": board.nvml_name,
        "uuid": f"GPU-{index:08x}-1111-2222-3333-444444444444",
        "pci_device_id": f"{pci_device_id(board.pci_product):04x}",
        "memory_total": board.memory_bytes,
        "pcie": {"max_generation": board.pcie_generation,
                 "gpu_max_generation": board.pcie_generation, "max_width": 16},
        "max_clocks": {"sm": board.sm_max_mhz, "mem": board.mem_max_mhz},
        "power_limit_mw": board.power_limit_mw,
        "ecc": {"uncorrected_volatile": 0, "uncorrected_aggregate": 0,
                "corrected_volatile": 3, "corrected_aggregate": 12},
        "remapped_rows": [0, 0, 0, 0],
        "retired_pages_pending": False,
        "nvlink": [board.nvlink_version] * board.links,
        "processes": [],
        "readings": [idle, copy.deepcopy(loaded), copy.deepcopy(loaded)],
    }


def healthy(board: Board, count: int) -> dict[str, Any]:
    """``count`` healthy GPUs of ``board``, as one host's NVML reports them."""
    return {"about": f"{count} healthy {board.pci_product}", "gpus": [
        gpu(board, i) for i in range(count)]}


def five_h100_one_fault_each() -> dict[str, Any]:
    """An HGX H100's first five GPUs: one healthy, then one fault per GPU.

    GPU 1's link trained to x8 of x16; GPU 2's clock held at 700 MHz by a hardware
    slowdown at 91 °C; GPU 3 has a row remap pending after two uncorrectable errors;
    GPU 4 has 12 of its 18 NVLinks up.
    """
    gpus = [gpu(H100_SXM5_80GB, i) for i in range(5)]
    gpus[1]["about"] = "link trained to x8 of x16"
    for reading in gpus[1]["readings"]:
        reading["pcie_width"] = 8
    gpus[2]["about"] = "clock held at 700 MHz by a hardware slowdown at 91 C"
    for reading in gpus[2]["readings"][1:]:
        reading.update(sm_clock=700, temp=91, reasons=(
            pynvml.nvmlClocksEventReasonHwSlowdown
            | pynvml.nvmlClocksEventReasonHwThermalSlowdown))
    gpus[3]["about"] = "a row remap pending after 2 uncorrectable errors"
    gpus[3]["remapped_rows"] = [0, 2, 1, 0]
    gpus[4]["about"] = "12 of 18 NVLinks up"
    gpus[4]["nvlink"] = [H100_SXM5_80GB.nvlink_version] * 12 + [
        pynvml.NVML_NVLINK_VERSION_INVALID] * 6
    return {"about": five_h100_one_fault_each.__doc__, "gpus": gpus}
