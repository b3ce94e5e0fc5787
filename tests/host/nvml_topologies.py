"""Whole machines as NVML describes what joins their GPUs, built from NVIDIA's own definitions.

What :class:`tests.host.fake_nvml.FakeNvml` replays for the topology tests. Each machine is
the GPUs of :mod:`tests.host.nvml_boards` (PCI IDs from pci.ids, NVLink versions as
``nvmlNvlinkVersion_t``) plus, for every link, what NVML says is at its far end
(``NVML_NVLINK_DEVICE_TYPE_GPU`` and that GPU's PCI address, or ``_SWITCH``), and for every
pair the P2P statuses (``NVML_P2P_STATUS_OK`` or ``_NOT_SUPPORTED``) and the PCIe level
both hang off (``NVML_TOPOLOGY_SINGLE``, ``_NODE``, ``_HOSTBRIDGE``, ``_SYSTEM``). No enum is
a number typed here.

The machines, each with where its map comes from:

* HGX H100 8-GPU: every GPU's 18 links to the board's NVSwitches (NVIDIA HGX H100 and
  nvidia-smi topo -m's NV18 between every pair), GPUs 0-3 on socket 0, 4-7 on socket 1;
* a 2- and a 4-GPU slice of it in a VM (``NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH``): with
  no fabric given to the VM its links are down (as the H200 VM record,
  ``shared/reference/gpu-h200``); in a Fabric Manager partition they are up to the switches;
* 4x H100 NVL with NVLink bridges joining GPUs 0-1 and 2-3 (12 links each pair, the H100
  NVL datasheet's 600 GB/s bidirectional), the other pairs over PCIe;
* DGX-1 (V100 SXM2), the hybrid cube mesh: each GPU's six NVLink 2.0 links to four peers,
  two of them doubly (NCCL's topology dump of a DGX-1V in NVIDIA/nccl issue #671: GPU 0 to
  GPUs 1 and 2 by one link, to 3 and 4 by two), the other pairs across sockets;
* 8x L40S, PCIe only, four GPUs per socket;
* 4x A100 PCIe with NVLink bridges joining 0-1 and 2-3 (12 links, the A100 datasheet's
  600 GB/s bridge).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from tests.host import nvml_boards
from tests.host.nvml_boards import Board

INVALID = pynvml.NVML_NVLINK_VERSION_INVALID
GPU_END = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU
SWITCH_END = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
OK = pynvml.NVML_P2P_STATUS_OK
NO = pynvml.NVML_P2P_STATUS_NOT_SUPPORTED

V100_SXM2_16GB = Board("Tesla V100-SXM2-16GB", "Tesla V100 SXM2 16GB",
                       pynvml.NVML_NVLINK_VERSION_2_0, 6, 3, 1530, 877, 300_000, 17_179_869_184)
H100_NVL = Board("NVIDIA H100 NVL", "H100L 94GB", pynvml.NVML_NVLINK_VERSION_4_0, 12, 5,
                 1785, 2619, 400_000, 100_485_038_080)
L40S = Board("NVIDIA L40S", "L40S", INVALID, 0, 4, 2520, 9001, 350_000, 48_305_799_168)
A100_PCIE_40GB = Board("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB",
                       pynvml.NVML_NVLINK_VERSION_3_1, 12, 4, 1410, 1215, 250_000,
                       42_949_672_960)

# The DGX-1's hybrid cube mesh: (GPU, GPU): links between them (NVIDIA/nccl#671's dump).
DGX1_MESH = {
    (0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2,
    (2, 3): 2, (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2,
    (5, 7): 1, (6, 7): 2,
}


def bus(index: int) -> str:
    return f"0000:{0x18 + 0x10 * index:02x}:00.0"


@dataclass
class Machine:
    """One machine's NVML readings and what the test expects of each pair."""

    name: str
    board: Board
    readings: dict[str, Any]
    # (a, b), a < b: the path's kind ("nvlink", "nvswitch", "pcie"), links, the row's words
    paths: dict[tuple[int, int], tuple[str, int, str]] = field(default_factory=dict)
    faults: dict[str, Callable[[], Machine]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.readings["gpus"])


def _gpus(board: Board, count: int, passthrough: bool = False) -> list[dict[str, Any]]:
    gpus = []
    for i in range(count):
        gpu = nvml_boards.gpu(board, i)
        gpu["bus"] = bus(i)
        gpu["nvlink"], gpu["nvlink_remote"] = [], []
        gpu["virtualization_mode"] = (pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH
                                      if passthrough else pynvml.NVML_GPU_VIRTUALIZATION_MODE_NONE)
        gpus.append(gpu)
    return gpus


def _link(gpu: dict[str, Any], version: int, kind: int | None, remote: str | None) -> None:
    gpu["nvlink"].append(version)
    gpu["nvlink_remote"].append(None if kind is None else {"type": kind, "bus": remote})


def _pairs(count: int, level: Callable[[int, int], int], nvlink: Callable[[int, int], bool]
           ) -> dict[str, dict[str, int]]:
    return {f"{a},{b}": {"nvlink": OK if nvlink(a, b) else NO, "read": OK,
                         "ancestor": level(a, b)}
            for a in range(count) for b in range(a + 1, count)}


def _sockets(per_socket: int) -> Callable[[int, int], int]:
    return lambda a, b: (pynvml.NVML_TOPOLOGY_NODE if a // per_socket == b // per_socket
                         else pynvml.NVML_TOPOLOGY_SYSTEM)


def _pcie_words(level: int) -> str:
    return {pynvml.NVML_TOPOLOGY_NODE: "PCIe via CPU socket",
            pynvml.NVML_TOPOLOGY_SYSTEM: "PCIe across sockets",
            pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PCIe via a CPU host bridge"}[level]


def hgx_h100(count: int = 8, *, vm: bool = False, partition: bool = False) -> Machine:
    """An HGX H100 8-GPU board, or ``count`` of its GPUs passed into a VM."""
    board = nvml_boards.H100_SXM5_80GB
    gpus = _gpus(board, count, passthrough=vm)
    up = not vm or partition
    for gpu in gpus:
        for _ in range(board.links):
            if up:
                _link(gpu, board.nvlink_version, SWITCH_END, None)
            else:
                _link(gpu, INVALID, None, None)
    level = (lambda a, b: pynvml.NVML_TOPOLOGY_HOSTBRIDGE) if vm else _sockets(4)
    readings = {"gpus": gpus, "pairs": _pairs(count, level, lambda a, b: up)}
    name = "HGX H100 8-GPU" if not vm else (
        f"{count} GPUs of an HGX H100 in a VM" + (" (Fabric Manager partition)" if partition
                                                  else " (no fabric)"))
    paths = {(a, b): ("nvswitch", board.links, "NVLink 4.0 via NVSwitch (18 links)") if up
             else ("pcie", 0, _pcie_words(level(a, b)))
             for a in range(count) for b in range(a + 1, count)}
    machine = Machine(name, board, readings, paths)
    return _with_faults(machine, lambda: hgx_h100(count, vm=vm, partition=partition))


def bridged(board: Board, count: int = 4) -> Machine:
    """PCIe cards with NVLink bridges joining 0-1, 2-3, …; the other pairs over PCIe."""
    gpus = _gpus(board, count)
    for i, gpu in enumerate(gpus):
        peer = i ^ 1
        for _ in range(board.links):
            _link(gpu, board.nvlink_version, GPU_END, bus(peer))
    level = _sockets(2)
    readings = {"gpus": gpus, "pairs": _pairs(count, level, lambda a, b: b == a ^ 1)}
    version = "4.0" if board.nvlink_version == pynvml.NVML_NVLINK_VERSION_4_0 else "3.1"
    paths = {(a, b): ("nvlink", board.links, f"{board.links} × NVLink {version}") if b == a ^ 1
             else ("pcie", 0, _pcie_words(level(a, b)))
             for a in range(count) for b in range(a + 1, count)}
    machine = Machine(f"{count}x {board.pci_product} with bridged pairs", board, readings, paths)
    return _with_faults(machine, lambda: bridged(board, count))


def dgx1() -> Machine:
    """A DGX-1 with V100 SXM2: the hybrid cube mesh of :data:`DGX1_MESH`."""
    board = V100_SXM2_16GB
    gpus = _gpus(board, 8)
    for (a, b), links in DGX1_MESH.items():
        for _ in range(links):
            _link(gpus[a], board.nvlink_version, GPU_END, bus(b))
            _link(gpus[b], board.nvlink_version, GPU_END, bus(a))
    level = _sockets(4)
    readings = {"gpus": gpus, "pairs": _pairs(8, level, lambda a, b: (a, b) in DGX1_MESH)}
    paths = {(a, b): ("nvlink", DGX1_MESH[(a, b)], f"{DGX1_MESH[(a, b)]} × NVLink 2.0")
             if (a, b) in DGX1_MESH else ("pcie", 0, _pcie_words(level(a, b)))
             for a in range(8) for b in range(a + 1, 8)}
    return _with_faults(Machine("DGX-1 V100 (hybrid cube mesh)", board, readings, paths), dgx1)


def l40s() -> Machine:
    """Eight L40S on PCIe only, four per socket."""
    gpus = _gpus(L40S, 8)
    level = _sockets(4)
    readings = {"gpus": gpus, "pairs": _pairs(8, level, lambda a, b: False)}
    paths = {(a, b): ("pcie", 0, _pcie_words(level(a, b))) for a in range(8)
             for b in range(a + 1, 8)}
    return _with_faults(Machine("8x L40S, two sockets", L40S, readings, paths), l40s)


def _with_faults(machine: Machine, build: Callable[[], Machine]) -> Machine:
    """The planted faults: a link down (an NVLink where one is up, else a PCIe link at x8)."""

    def link_down() -> Machine:
        broken = build()
        gpus = broken.readings["gpus"]
        first = next((g for g in gpus if any(v != INVALID for v in g["nvlink"])), None)
        if first is None:
            broken.name += ", GPU 1's PCIe link trained to x8"
            for reading in gpus[1]["readings"]:
                reading["pcie_width"] = 8
            return broken
        link = next(i for i, v in enumerate(first["nvlink"]) if v != INVALID)
        remote = first["nvlink_remote"][link]
        first["nvlink"][link] = INVALID
        if remote and remote["type"] == GPU_END:  # a direct link is down at both ends
            peer = next(g for g in gpus if g["bus"] == remote["bus"])
            back = next(i for i, r in enumerate(peer["nvlink_remote"])
                        if r and r["bus"] == first["bus"] and peer["nvlink"][i] != INVALID)
            peer["nvlink"][back] = INVALID
        broken.name += f", NVLink {link} of GPU {gpus.index(first)} down"
        return broken

    machine.faults = {"link down": link_down}
    return machine


def machines() -> list[Machine]:
    """Every machine the topology tests judge."""
    return [hgx_h100(), hgx_h100(2, vm=True), hgx_h100(4, vm=True),
            hgx_h100(2, vm=True, partition=True), hgx_h100(4, vm=True, partition=True),
            bridged(H100_NVL), dgx1(), l40s(), bridged(A100_PCIE_40GB)]


def deep(machine: Machine) -> dict[str, Any]:
    return copy.deepcopy(machine.readings)
