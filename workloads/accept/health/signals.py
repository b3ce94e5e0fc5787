"""The quick check's free signals: what NVML answers at once about a GPU's links and clocks.

Read per GPU, no load, a dozen NVML calls (a health run's time barely moves):

* NVLinks that are down (``nvmlDeviceGetNvLinkState`` answering ``NVML_FEATURE_DISABLED`` for a
  link the GPU has): NVIDIA's health checks tolerate none (``max_inactive_nvlinks`` 0, "NVLink
  Active Links", NVIDIA Health Validation check catalogue) -- fail;
* the clock event reasons (``nvmlDeviceGetCurrentClocksEventReasons``), by NVML's named bits:
  HW thermal slowdown and HW power brake slowdown fail (the GPU is protecting itself: cooling,
  power delivery); HW slowdown beside either is named with them; HW slowdown alone and SW
  thermal slowdown warn -- NVML documents that HW slowdown "may be also reported during PState
  or clock change", so one reading of it alone would drain a healthy node; power cap, idle,
  application or user clocks, sync boost are what a healthy GPU reports;
* the PCIe link now against the most this GPU in this slot can train to
  (``nvmlDeviceGetCurrPcieLinkWidth``/``Generation`` against ``nvmlDeviceGetMaxPcieLinkWidth``/
  ``Generation``): a narrower link fails (a x8 link on a x16 GPU halves host transfers and does
  not widen at load); a slower generation only warns, because an idle GPU lowers its link speed
  to save power and raises it under load (``workloads accept`` measures it loaded).

A reading NVML does not answer is left out (None), never taken as good or bad.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from workloads.accept.verdicts import FAIL, PASS, WARN, Finding
from workloads.hardware.nvml import read_or_none as _read

CHECK = "health"


def _bit(name: str) -> int:
    """pynvml's bit for ``nvmlClocksEventReason<name>`` (older pynvml: ``...ThrottleReason...``)."""
    value = getattr(pynvml, f"nvmlClocksEventReason{name}", None)
    if value is None:
        value = getattr(pynvml, f"nvmlClocksThrottleReason{name}")
    return int(value)


FAILING_REASONS = {
    "HwThermalSlowdown": "HW thermal slowdown (the GPU is too hot: check its cooling)",
    "HwPowerBrakeSlowdown": "HW power brake slowdown (the system asserted the power brake: check "
                            "the power supplies)",
}
# Named beside a failing reason; alone a warn (NVML: also reported during a P-state change).
HW_SLOWDOWN = "HwSlowdown", "HW slowdown (thermal or power protection: check cooling and power)"
WARNING_REASONS = {
    "SwThermalSlowdown": "SW thermal slowdown (running hot: check the airflow)",
    HW_SLOWDOWN[0]: "HW slowdown alone (NVML also reports it during a P-state or clock change; "
                    "if it stays, check cooling and power)",
}


@dataclass(frozen=True)
class Signals:
    """One GPU's free signals; None where NVML did not answer."""

    index: int
    links: int | None  # NVLinks the GPU has (NVML answers a state for), None: no NVLink
    inactive: tuple[int, ...]  # the ones that are down
    reasons: int | None
    pcie_width: int | None
    pcie_max_width: int | None
    pcie_generation: int | None
    pcie_max_generation: int | None




def read(nvml: Any, index: int) -> Signals:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    links, inactive = 0, []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = _read(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue  # a link this GPU does not have
        links += 1
        if state != pynvml.NVML_FEATURE_ENABLED:
            inactive.append(link)
    return Signals(
        index=index,
        links=links or None,
        inactive=tuple(inactive),
        reasons=_read(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle),
        pcie_width=_read(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
        pcie_max_width=_read(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        pcie_generation=_read(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_max_generation=_read(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
    )


def has_fabric(node: list[Signals]) -> bool:
    """Whether any GPU of the node has an active NVLink.

    A PCIe card with no NVLink bridge fitted answers ``NVML_FEATURE_DISABLED`` for every link it
    has, just as a GPU whose links all went down does; only the node tells the two apart: where
    no GPU has an active link there is no NVLink fabric to lose (or it is all gone, which the
    other checks and CUDA see), where some have, a GPU with links down has lost them.
    """
    return any(s.links is not None and len(s.inactive) < s.links for s in node)


def judge(label: str, s: Signals, fabric: bool = True) -> list[Finding]:
    """The NVLink, clocks and PCIe-link rows of one GPU; ``fabric``: :func:`has_fabric`."""
    rows = []
    if s.links is not None:
        if not fabric and len(s.inactive) == s.links:
            rows.append(Finding(
                CHECK, label, "NVLinks", WARN, f"no NVLink active (0 of {s.links}) on any GPU of "
                "this node: a PCIe card without an NVLink bridge reads so; if these GPUs are "
                "NVLink-connected, reset them and check the bridges or Fabric Manager",
                0, "links", s.links, details={"inactive": list(s.inactive), "links": s.links}))
        elif s.inactive:
            down = ", ".join(str(link) for link in s.inactive)
            rows.append(Finding(
                CHECK, label, "NVLinks", FAIL, f"{len(s.inactive)} of {s.links} NVLinks inactive "
                f"(links {down}): reset the GPU, then reboot; reseat or service the GPU and its "
                "NVLink connections if they stay down", len(s.inactive), "links", 0,
                "NVIDIA Health Validation: max_inactive_nvlinks 0",
                details={"inactive": list(s.inactive), "links": s.links,
                         "meaning": f"{len(s.inactive)} NVLinks inactive",
                         "action": "reset the GPU, then reboot"}))
        else:
            rows.append(Finding(CHECK, label, "NVLinks", PASS, f"all {s.links} NVLinks active",
                                0, "links", 0))
    if s.reasons is not None:
        failing = [t for n, t in FAILING_REASONS.items() if s.reasons & _bit(n)]
        if failing and s.reasons & _bit(HW_SLOWDOWN[0]):
            failing.append(HW_SLOWDOWN[1])
        warning = [t for n, t in WARNING_REASONS.items() if s.reasons & _bit(n)]
        details = {"reasons": s.reasons}
        if failing:
            rows.append(Finding(CHECK, label, "clocks", FAIL, f"{'; '.join(failing)}: the clocks "
                                "are held down", details={**details, "meaning": failing[0],
                                                          "action": "check cooling and power"}))
        elif warning:
            rows.append(Finding(CHECK, label, "clocks", WARN, "; ".join(warning), details=details))
        else:
            rows.append(Finding(CHECK, label, "clocks", PASS, "no thermal or power slowdown",
                                details=details))
    if s.pcie_width is not None and s.pcie_max_width is not None:
        rows.append(_pcie_width(label, s.pcie_width, s.pcie_max_width))
    if s.pcie_generation is not None and s.pcie_max_generation is not None:
        if s.pcie_generation < s.pcie_max_generation:
            rows.append(Finding(
                CHECK, label, "PCIe gen", WARN, f"PCIe link at gen {s.pcie_generation}, can "
                f"train to gen {s.pcie_max_generation}: normal for an idle GPU (it saves power); "
                "if it stays there under load, reseat the GPU", s.pcie_generation, "gen",
                s.pcie_max_generation))
        else:
            rows.append(Finding(CHECK, label, "PCIe gen", PASS, f"PCIe gen {s.pcie_generation}",
                                s.pcie_generation, "gen", s.pcie_max_generation))
    return rows


def _pcie_width(label: str, width: int, most: int) -> Finding:
    if width < most:
        return Finding(
            CHECK, label, "PCIe width", FAIL, f"PCIe link trained at x{width}, the GPU and its "
            f"slot can do x{most}: reseat the GPU or check its riser and slot", width, "lanes",
            most, details={"meaning": f"PCIe link x{width} of x{most}",
                           "action": "reseat the GPU, check its riser and slot"})
    return Finding(CHECK, label, "PCIe width", PASS, f"PCIe x{width}", width, "lanes", most)
