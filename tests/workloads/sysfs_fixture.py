"""A PCI sysfs tree in the kernel's shape, for the AER counters and the GPU count.

As on a real host, ``bus/pci/devices/<bdf>`` is a symbolic link into
``devices/pci0000:00/<port>/<bdf>``, so the port above a GPU is its parent directory; each
function has ``vendor`` and ``class`` files (``0x10de``, ``0x030200``) and, where AER is on,
the three ``aer_dev_*`` files with every error name of the kernel's ABI document
(``Documentation/ABI/testing/sysfs-bus-pci-devices-aer_stats``) and the ``TOTAL_ERR_*`` line.
"""

from __future__ import annotations

from pathlib import Path

CORRECTABLE = (
    "Receiver Error",
    "Bad TLP",
    "Bad DLLP",
    "RELAY_NUM Rollover",
    "Replay Timer Timeout",
    "Advisory Non-Fatal",
    "Corrected Internal Error",
    "Header Log Overflow",
)
UNCORRECTABLE = (
    "Undefined",
    "Data Link Protocol",
    "Surprise Down Error",
    "Poisoned TLP",
    "Flow Control Protocol",
    "Completion Timeout",
    "Completer Abort",
    "Unexpected Completion",
    "Receiver Overflow",
    "Malformed TLP",
    "ECRC",
    "Unsupported Request",
    "ACS Violation",
    "Uncorrectable Internal Error",
    "MC Blocked TLP",
    "AtomicOp Egress Blocked",
    "TLP Prefix Blocked Error",
)
FILES = {
    "correctable": (CORRECTABLE, "TOTAL_ERR_COR"),
    "nonfatal": (UNCORRECTABLE, "TOTAL_ERR_NONFATAL"),
    "fatal": (UNCORRECTABLE, "TOTAL_ERR_FATAL"),
}


def aer_text(kind: str, counts: dict[str, int]) -> str:
    names, total = FILES[kind]
    unknown = set(counts) - set(names)
    assert not unknown, f"not an AER {kind} error name in the kernel's ABI: {unknown}"
    lines = [f"{name} {counts.get(name, 0)}" for name in names]
    return "\n".join([*lines, f"{total} {sum(counts.values())}"]) + "\n"


def _function(
    path: Path, vendor: int, pci_class: int, aer: dict[str, dict[str, int]] | None
) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "vendor").write_text(f"0x{vendor:04x}\n")
    (path / "class").write_text(f"0x{pci_class:06x}\n")
    if aer is not None:
        for kind in FILES:
            (path / f"aer_dev_{kind}").write_text(aer_text(kind, aer.get(kind, {})))


def pci_tree(
    root: Path,
    gpus: dict[str, dict[str, dict[str, int]] | None],
    ports: dict[str, dict[str, dict[str, int]] | None] | None = None,
) -> Path:
    """Build the tree under ``root``; returns its ``bus/pci/devices``.

    ``gpus`` maps a GPU's bus address to its AER counts (kind -> error name -> count; None:
    no AER files); ``ports`` the same for the root port above each GPU (by GPU address).
    Beside them sits a non-NVIDIA function (a NIC) that must never count as a GPU.
    """
    devices = root / "bus" / "pci" / "devices"
    devices.mkdir(parents=True)
    bus = root / "devices" / "pci0000:00"
    for number, (bdf, counts) in enumerate(sorted(gpus.items()), start=1):
        port = bus / f"0000:00:{number:02x}.0"
        _function(port, 0x8086, 0x060400, (ports or {}).get(bdf, {}))
        (devices / port.name).symlink_to(port)
        _function(port / bdf, 0x10DE, 0x030200, counts)
        (devices / bdf).symlink_to(port / bdf)
    nic = bus / "0000:00:1f.0" / "0000:c1:00.0"
    _function(nic, 0x15B3, 0x020000, {})
    (devices / nic.name).symlink_to(nic)
    return devices
