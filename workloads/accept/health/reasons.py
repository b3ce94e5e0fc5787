"""From a run's failures to SLURM drain reasons that keep their meaning from run to run.

A reason names the fault, the GPU (NVML index, PCI bus id, board serial), the action and when
the fault was first seen (:class:`workloads.accept.health.slurm.Cause`; the grammar is in
scripts/slurm/README.md). Every field comes from what does not change while the fault stays
open: the event's catalogue meaning and action (kept in the state for an open XID), the
first-seen time kept in the state, the GPU's identity as NVML gives it. So the same open fault
gives the same reason at every run, and the node's drain (and Slurm's time for it) stays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from workloads.accept.errors import device_key
from workloads.accept.health.slurm import Cause
from workloads.accept.verdicts import Finding


@dataclass(frozen=True)
class Gpu:
    """What names a GPU in a reason."""

    index: int | None
    pci: str | None  # sysfs form, 0000:3b:00.0
    serial: str | None

    def where(self) -> str:
        index = "-" if self.index is None else str(self.index)
        return f"gpu {index} {self.pci or '-'} sn {self.serial or '-'}"


_GPU = re.compile(r"GPU (\d{1,3})$")
_PCI = re.compile(r"PCI ([0-9a-fA-F:.]{7,16})$")
_SWITCH = re.compile(r"NVSwitch (\d{1,4}) \(([0-9a-fA-F:.]{7,16})\)$")


def where(device: str, gpus: list[Gpu]) -> str:
    """The WHERE field for a finding's device: a GPU's index, bus id and serial, or ``host``."""
    if (found := _GPU.match(device)) is not None:
        index = int(found[1])
        return next((g for g in gpus if g.index == index), Gpu(index, None, None)).where()
    if (found := _PCI.match(device)) is not None:
        key = device_key(found[1])
        at_bus = next((g for g in gpus if g.pci and device_key(g.pci) == key), None)
        return (at_bus or Gpu(None, found[1].lower(), None)).where()
    if (found := _SWITCH.match(device)) is not None:
        return f"nvswitch {found[1]} {found[2].lower()}"
    return "host" if device in ("host", "") else device


def _split(reason: str) -> tuple[str, str]:
    """A finding's reason as (what is wrong, what to do): the house style is "problem: fix"."""
    what, _, todo = reason.partition(": ")
    return what, todo or "see workloads health"


def cause(finding: Finding, gpus: list[Gpu], since: float) -> Cause:
    """The drain reason's fields for one failing finding."""
    meaning = str(finding.details.get("meaning") or "")
    action = str(finding.details.get("action") or "")
    if not meaning or not action:
        what, todo = _split(str(finding.details.get("first_reason") or finding.reason))
        meaning, action = meaning or what, action or todo
    fault = f"{finding.item} {meaning}" if not meaning.startswith(finding.item) else meaning
    return Cause(fault, where(finding.device, gpus), action, since)
