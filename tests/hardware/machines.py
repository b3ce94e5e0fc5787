"""Fake PCI trees of the GPU machines people own, from a Pascal box to an HGX B200.

Why: the nvidia_driver role decides the kernel-module flavour, the branch and
Fabric Manager from the host's PCI functions before anything is installed,
and CI has none of these machines. Each machine is written as the kernel lays
out /sys/bus/pci/devices (vendor, device, class per function; the writer is
tests/hypervisor/fake_sysfs.py) and the role's nvidia_driver_pci_devices_path
points at it. IDs are the real ones (lspci -nn; the PCI ID repository), except
where a comment says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.hypervisor.fake_sysfs import FakeFunction, build_sysfs

GPU_CLASS = "030200"  # 3D controller: datacenter GPUs
VGA_CLASS = "030000"
NVSWITCH_CLASS = "068000"  # bridge, subclass "other": how NVSwitches enumerate

# The host side every machine shares: a root complex, a BMC's VGA, a NIC.
CHIPSET = [
    FakeFunction("0000:00:00.0", "8086:09a2", "060000"),
    FakeFunction("0000:02:00.0", "1a03:2000", VGA_CLASS),
    FakeFunction("0000:19:00.0", "15b3:1021", "020700"),  # ConnectX-7
]


@dataclass(frozen=True)
class Machine:
    """One fake machine: its name, its NVIDIA functions and what nvidia-smi would list."""

    name: str
    gpu_id: str  # 10de:xxxx
    gpus: int
    smi_name: str  # nvidia-smi's name for the GPU
    compute_capability: str
    memory_mib: int
    nvswitch_id: str = ""
    nvswitches: int = 0
    extra: tuple[FakeFunction, ...] = ()

    def functions(self) -> list[FakeFunction]:
        buses = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB]
        found = [FakeFunction(f"0000:{buses[i]:02x}:00.0", self.gpu_id, GPU_CLASS)
                 for i in range(self.gpus)]
        found += [FakeFunction(f"0000:{0xC0 + i:02x}:00.0", self.nvswitch_id, NVSWITCH_CLASS)
                  for i in range(self.nvswitches)]
        return [*CHIPSET, *found, *self.extra]

    def build(self, root: Path) -> Path:
        """Write the tree; returns the devices directory (nvidia_driver_pci_devices_path)."""
        return build_sysfs(root, self.functions()) / "bus" / "pci" / "devices"

    def smi_gpus(self) -> str:
        """/var/lib/nvidia-stub/gpus for the nvidia-smi stub: one "NAME, CC, MIB" per GPU."""
        return "".join(f"{self.smi_name}, {self.compute_capability}, {self.memory_mib}\n"
                       for _ in range(self.gpus))


P100 = Machine("p100", "10de:15f8", 4, "Tesla P100-PCIE-16GB", "6.0", 16384)
V100 = Machine("v100", "10de:1db1", 8, "Tesla V100-SXM2-16GB", "7.0", 16384)  # DGX-1: no NVSwitch
T4 = Machine("t4", "10de:1eb8", 1, "Tesla T4", "7.5", 15360)
A100_HGX = Machine("a100-hgx", "10de:20b2", 8, "NVIDIA A100-SXM4-80GB", "8.0", 81920,
                   nvswitch_id="10de:1af1", nvswitches=6)
H100_HGX = Machine("h100-hgx", "10de:2330", 8, "NVIDIA H100 80GB HBM3", "9.0", 81559,
                   nvswitch_id="10de:22a3", nvswitches=4)
H100_PCIE = Machine("h100-pcie", "10de:2331", 2, "NVIDIA H100 PCIe", "9.0", 81559)
# HGX B200: two NVLink switch chips on the baseboard. Their device ID here is a
# placeholder (the role keys on vendor 10de + class 0680, and flags NVLink 5
# from the B200's own ID, so the decision does not depend on it).
B200_HGX = Machine("b200-hgx", "10de:2901", 8, "NVIDIA B200", "10.0", 183359,
                   nvswitch_id="10de:2a00", nvswitches=2)
# The seed's Pascal box after someone added two A100 PCIe cards.
PASCAL_AMPERE = Machine("pascal-ampere", "10de:15f8", 2, "Tesla P100-PCIE-16GB", "6.0", 16384,
                        extra=(FakeFunction("0000:d0:00.0", "10de:20f1", GPU_CLASS),
                               FakeFunction("0000:d1:00.0", "10de:20f1", GPU_CLASS)))

# Boards whose table rows a review found missing or wrong (see the role README):
# TITAN V sits below the V100 block; GH200 and GB200 are open-only, and a GB200
# compute tray runs no Fabric Manager (its NVLink switches are managed from the
# switch trays); HGX B300's NVLink 5 switches are not NVIDIA PCI functions, so
# only the B300's own ID can say that it needs Fabric Manager and NVLSM.
TITAN_V = Machine("titan-v", "10de:1d81", 1, "NVIDIA TITAN V", "7.0", 12288)
GH200 = Machine("gh200", "10de:2342", 1, "NVIDIA GH200 480GB", "9.0", 97871)
GB200 = Machine("gb200", "10de:2941", 4, "NVIDIA GB200", "10.0", 189471)
B300_HGX = Machine("b300-hgx", "10de:3182", 8, "NVIDIA B300 SXM6 AC", "10.3", 275040)

MACHINES = [P100, V100, T4, A100_HGX, H100_HGX, H100_PCIE, B200_HGX, PASCAL_AMPERE]
