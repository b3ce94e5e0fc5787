"""Kernel-log lines in the NVIDIA driver's real formats, built from the XID catalogue.

The shapes are the ones NVIDIA documents and real logs show (``workloads/hardware/xid.py``
cites each): ``[<seconds since boot>] NVRM: Xid (PCI:<bdf>): <code>, <raw information>``,
the NVSwitch's ``nvidia-nvswitchN: SXid (PCI:<bdf>): <code>, <Fatal|Non-fatal>, Link <n>
<description>`` followed by its ``Severity`` and ``Data`` lines, and the ordinary kernel
lines around them. The text after an XID's code is, for the codes a real capture was found
for, that capture's text; for the others the catalogue's own description.
"""

from __future__ import annotations

from pathlib import Path

from workloads.hardware import xid

# Real captures: NVIDIA/gpu-operator issue 1146 (XID 48), a dmesg capture of XID 79 with
# SXid 20034 (leptonai/gpud docs), the Fabric Manager guide's XID 45 example.
CAPTURED = {
    79: "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    48: "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been "
    "detected on GPU in the framebuffer at physAddr 0x7fdd60000 partition 5, subpartition 1",
    45: "Ch 00000010",
}

NOISE = (
    "Linux version 6.1.0-27-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC",
    "pci 0000:3b:00.0: [10de:2330] type 00 class 0x030200",
    "nvidia: module license 'NVIDIA' taints kernel.",
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024",
    "nvidia-nvswitch: Probing device 0000:05:00.0, Vendor Id = 0x10de, Device Id = 0x22a3",
    "NVRM: GPU at PCI:0000:3b:00: GPU-c43f0536-e751-7211-d7a7-78c95249ee7d",
    "NVRM: GPU Board Serial Number: 0323618040756",
    "EXT4-fs (nvme0n1p2): mounted filesystem with ordered data mode.",
)


def stamp(seconds: float) -> str:
    return f"[{seconds:12.6f}]"


def xid_line(seconds: float, bdf: str, code: int, text: str | None = None) -> str:
    """One XID line; ``bdf`` as the driver prints it (``0000:3b:00``)."""
    if text is None:
        entry = xid.load().xids.get(code)
        text = CAPTURED.get(code) or f"pid=1234, name=python3, {entry.description if entry else ''}"
    return f"{stamp(seconds)} NVRM: Xid (PCI:{bdf}): {code}, {text}"


def sxid_lines(
    seconds: float, switch: int, bdf: str, code: int, fatal: bool, link: int, text: str
) -> list[str]:
    """An SXid event with the raw-data lines the NVSwitch driver prints after it."""
    severity = "Fatal" if fatal else "Non-fatal"
    head = f"nvidia-nvswitch{switch}: SXid (PCI:{bdf}): {code}"
    return [
        f"{stamp(seconds)} {head}, {severity}, Link {link} {text}",
        f"{stamp(seconds)} {head}, Severity {1 if fatal else 0} Engine instance {link} "
        "Sub-engine instance 00",
        f"{stamp(seconds)} {head}, Data {{0x00140004, 0x00100000, 0x00140004, 0x00000000}}",
    ]


def noise(start: float, count: int) -> list[str]:
    return [f"{stamp(start + i * 0.001)} {NOISE[i % len(NOISE)]}" for i in range(count)]


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path
