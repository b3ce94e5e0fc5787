"""Build a fake /sys with PCI devices and IOMMU groups, laid out like the kernel's.

Why: the gpu_passthrough role decides from sysfs what to pass through and
whether the IOMMU groups allow it. CI has no GPU and no IOMMU, so the tests
write the same files and symlinks the kernel would (vendor, device, class,
driver -> ../drivers/X, iommu_group -> kernel/iommu_groups/N and the group's
devices/ links) and point gpu_passthrough_sysfs_root at the tree.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FakeFunction:
    """One PCI function as lspci -D -nn would show it."""

    address: str  # 0000:65:00.0
    pci_id: str  # 10de:15f8
    pci_class: str  # 030200
    group: str | None = None  # IOMMU group; None while the IOMMU is off
    driver: str | None = None


def build_sysfs(root: Path, functions: Iterable[FakeFunction]) -> Path:
    """Write the tree under root; returns root (the value for gpu_passthrough_sysfs_root)."""
    devices = root / "bus" / "pci" / "devices"
    groups = root / "kernel" / "iommu_groups"
    devices.mkdir(parents=True, exist_ok=True)
    groups.mkdir(parents=True, exist_ok=True)
    for function in functions:
        vendor, device = function.pci_id.split(":")
        path = devices / function.address
        path.mkdir()
        (path / "vendor").write_text(f"0x{vendor}\n")
        (path / "device").write_text(f"0x{device}\n")
        (path / "class").write_text(f"0x{function.pci_class}\n")
        if function.driver:
            drivers = root / "bus" / "pci" / "drivers" / function.driver
            drivers.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(drivers, path), path / "driver")
        if function.group is not None:
            group = groups / function.group / "devices"
            group.mkdir(parents=True, exist_ok=True)
            os.symlink(os.path.relpath(group.parent, path), path / "iommu_group")
            os.symlink(os.path.relpath(path, group), group / function.address)
    return root


# The seed's hypervisor: four Tesla P100 PCIe 16 GB (10de:15f8) behind their own
# root ports, an onboard VGA for the console, a NIC. IOMMU on.
P100 = "10de:15f8"
SEED_HOST = [
    FakeFunction("0000:00:00.0", "8086:2020", "060000", "0"),
    FakeFunction("0000:00:1c.0", "8086:a190", "060400", "7", "pcieport"),
    FakeFunction("0000:02:00.0", "1a03:2000", "030000", "7", "ast"),
    FakeFunction("0000:17:00.0", "8086:2030", "060400", "20", "pcieport"),
    FakeFunction("0000:18:00.0", P100, "030200", "20", "nvidia"),
    FakeFunction("0000:3a:00.0", "8086:2030", "060400", "40", "pcieport"),
    FakeFunction("0000:3b:00.0", P100, "030200", "40", "nvidia"),
    FakeFunction("0000:86:00.0", P100, "030200", "70", "nouveau"),
    FakeFunction("0000:af:00.0", P100, "030200", "80"),
    FakeFunction("0000:19:00.0", "8086:1563", "020000", "21", "ixgbe"),
]

# A workstation card with HDMI audio and USB-C on the same slot (GTX/RTX-style).
CONSUMER_GPU = [
    FakeFunction("0000:01:00.0", "10de:1e87", "030000", "1", "nouveau"),
    FakeFunction("0000:01:00.1", "10de:10f8", "040300", "1", "snd_hda_intel"),
    FakeFunction("0000:01:00.2", "10de:1ad8", "0c0330", "1", "xhci_hcd"),
    FakeFunction("0000:01:00.3", "10de:1ad9", "0c8000", "1"),
    FakeFunction("0000:00:01.0", "8086:1901", "060400", "1", "pcieport"),
    FakeFunction("0000:00:1f.6", "8086:15bb", "020000", "9", "e1000e"),
]


def without_iommu(functions: Iterable[FakeFunction]) -> list[FakeFunction]:
    """The same machine booted without intel_iommu=on: no groups at all."""
    return [FakeFunction(f.address, f.pci_id, f.pci_class, None, f.driver) for f in functions]
