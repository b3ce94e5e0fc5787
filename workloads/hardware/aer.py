"""NVIDIA GPUs on the PCI bus and the PCIe AER error counters the kernel keeps for them.

Read from sysfs, not NVML: a GPU that has fallen off the bus or whose driver is not loaded
is still a PCI function here, so the count of GPUs the bus holds is what NVML's count is
held to (:func:`nvidia_gpus`), and the AER counters can be read with no driver at all.

The counters' format is the kernel's ABI (``Documentation/ABI/testing/
sysfs-bus-pci-devices-aer_stats``, kernel 4.19 and later): ``aer_dev_correctable``,
``aer_dev_nonfatal`` and ``aer_dev_fatal`` under ``/sys/bus/pci/devices/<dev>/``, one
``<Error Name> <count>`` per line (names may hold spaces: ``Receiver Error 2``,
``RELAY_NUM Rollover 0``) ending with a ``TOTAL_ERR_COR`` / ``TOTAL_ERR_NONFATAL`` /
``TOTAL_ERR_FATAL`` line. The same document notes that errors of a faulty endpoint may be
counted at its link partner instead (the root or switch port above it), so the port
upstream of each GPU is read as well: it is the parent directory of the GPU's resolved
sysfs path (``/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

SYSFS_PCI = Path("/sys/bus/pci/devices")
NVIDIA_VENDOR = 0x10DE
DISPLAY_CLASS = 0x03  # PCI base class 03h: display controller (VGA 0300h, 3D 0302h)
KINDS = ("correctable", "nonfatal", "fatal")
MAX_FILE = 1 << 14  # an AER file is a few hundred bytes


@dataclass(frozen=True)
class AerCounters:
    """One PCI function's AER counters: per kind, the total and every named error above 0."""

    bdf: str
    totals: dict[str, int | None]  # kind -> TOTAL_ERR_*; None where the file is absent
    errors: dict[str, dict[str, int]] = field(default_factory=dict)  # kind -> name -> count

    @property
    def supported(self) -> bool:
        return any(v is not None for v in self.totals.values())


@dataclass(frozen=True)
class GpuAer:
    """A GPU's own counters and those of the port above it (its link partner)."""

    gpu: AerCounters
    upstream: AerCounters | None


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text(errors="replace")[:32].strip(), 16)
    except (OSError, ValueError):
        return None


def nvidia_gpus(root: Path = SYSFS_PCI) -> list[str]:
    """Bus addresses (``0000:3b:00.0``) of the NVIDIA display/3D controllers, sorted."""
    try:
        entries = sorted(p for p in root.iterdir())
    except OSError:
        return []
    return [
        entry.name
        for entry in entries
        if _hex(entry / "vendor") == NVIDIA_VENDOR
        and ((_hex(entry / "class") or 0) >> 16) == DISPLAY_CLASS
    ]


def parse(text: str) -> tuple[int | None, dict[str, int]]:
    """An AER stats file: its ``TOTAL_ERR_*`` value and the named errors above zero."""
    total: int | None = None
    named: dict[str, int] = {}
    for line in text[:MAX_FILE].splitlines():
        name, _, value = line.strip().rpartition(" ")
        if not name or not value.isdigit():
            continue
        if name.startswith("TOTAL_ERR_"):
            total = int(value)
        elif int(value):
            named[name[:64]] = int(value)
    return total, named


def read_counters(device: Path) -> AerCounters:
    """The AER counters of the PCI function at ``device`` (a sysfs device directory)."""
    totals: dict[str, int | None] = {}
    errors: dict[str, dict[str, int]] = {}
    for kind in KINDS:
        try:
            text = (device / f"aer_dev_{kind}").read_text(errors="replace")
        except OSError:
            totals[kind] = None
            continue
        total, named = parse(text)
        totals[kind] = total if total is not None else sum(named.values())
        if named:
            errors[kind] = named
    return AerCounters(device.name, totals, errors)


def read_gpu(bdf: str, root: Path = SYSFS_PCI) -> GpuAer:
    """The GPU's counters and, where the port above it is a PCI function, that port's."""
    device = root / bdf
    upstream = None
    try:
        parent = device.resolve().parent
    except OSError:
        parent = None
    if parent is not None and (parent / "vendor").exists() and parent.name != bdf:
        upstream = read_counters(parent)
    return GpuAer(read_counters(device), upstream)
