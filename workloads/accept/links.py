"""The NVLink verdict of one GPU: one function, called by the battery and by the fleet report.

Which links count: only those whose far end this host can see (a GPU here, or an NVSwitch).
A link up to a GPU this host cannot see (its peer on another VM) is named in an ``info``
row and not judged. A GPU with none of its links up is judged only where its peers could be
here: alone (one visible GPU) or passed through to a VM (``NVML_GPU_VIRTUALIZATION_MODE_
PASSTHROUGH``), its board's other GPUs are elsewhere, and the row says so (``info``).

What a GPU should have up: the sourced figure of its model in the reference table where
there is one (``nvlink.links``), else the device's own answer (the links NVML answers a
state for). The battery writes the inputs into the row's ``details`` (:meth:`Summary.as_details`)
and the fleet report reads them back (:func:`summary_from_row`), so a record made by an
older battery, without them, is read from its figures (value: links up, limit: the board's)
and the number of GPUs it lists.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from workloads.accept.verdicts import FAIL, INFO, PASS, WARN, Finding
from workloads.hardware.nvml import GpuWatch, nvlink_version
from workloads.hardware.reference import NvLinkSpec
from workloads.hardware.topology import Node, Topology

HINT = ("check Fabric Manager (systemctl status nvidia-fabricmanager) and "
        "`nvidia-smi nvlink -s`, which names the links down")


@dataclass(frozen=True)
class Summary:
    """One GPU's links as the verdict needs them (a record's row can carry it)."""

    links: int  # links the device answers for (its own count)
    up: int  # links up
    unseen: int  # links up to a GPU this host cannot see
    visible_gpus: int
    passthrough: bool = False
    lowest_major: int | None = None  # the lowest NVLink generation among the links up

    def as_details(self) -> dict[str, Any]:
        return asdict(self)


def summarise(node: Node, topology: Topology) -> Summary:
    """A GPU's summary from the graph NVML gave."""
    majors = [v[0] for v in (nvlink_version(link.version) for link in node.up) if v is not None]
    return Summary(len(node.links), len(node.up), len(topology.unseen_peers(node.index)),
                   len(topology.nodes), node.passthrough, min(majors) if majors else None)


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def summary_from_row(row: dict[str, Any], visible_gpus: int) -> Summary | None:
    """The summary an NVLink row carries; from its figures for an older record; None: none."""
    details = row.get("details")
    if isinstance(details, dict) and _int(details.get("links")) is not None:
        try:
            return Summary(int(details["links"]), int(details["up"]), int(details["unseen"]),
                           int(details["visible_gpus"]), bool(details.get("passthrough")),
                           _int(details.get("lowest_major")))
        except (KeyError, TypeError, ValueError):
            pass
    up, board = _int(row.get("value")), _int(row.get("limit"))
    if up is None:
        return None
    return Summary(board if board is not None else up, up, 0, visible_gpus)


def decide(summary: Summary, spec: NvLinkSpec | None) -> tuple[str, str, int | None]:
    """(verdict, reason, the links expected) for one GPU's NVLinks; the single rule."""
    expected = spec.links if spec is not None else (summary.links or None)
    of = f" of {expected}" if expected else ""
    if summary.up == 0:
        if spec is not None and spec.optional:
            return INFO, "no NVLink bridge on this card: nothing to judge", expected
        if not summary.links and spec is None:
            return INFO, "no NVLink on this GPU", None
        if summary.visible_gpus < 2 or summary.passthrough:
            where = ("this GPU is the only one visible here" if summary.visible_gpus < 2
                     else "this GPU is passed through to a VM")
            return INFO, (f"none{of} NVLinks is up and {where}: its board's other GPUs are not "
                          "on this host, so there is no peer to link with; not judged. Judge "
                          "the fabric where all the board's GPUs are visible"), expected
        return FAIL, (f"no NVLink active{of}: GPU-to-GPU traffic falls back to PCIe; "
                      f"{HINT}"), expected
    if expected and summary.up < expected:
        return FAIL, (f"{summary.up}{of} NVLinks active: the GPU's links run at "
                      f"{summary.up / expected:.0%}; {HINT}"), expected
    if spec is not None and summary.lowest_major is not None \
            and summary.lowest_major < spec.generation:
        return WARN, (f"links at NVLink {summary.lowest_major}, the board has generation "
                      f"{spec.generation}"), expected
    source = "" if spec is not None else " (the links the GPU reports; no sourced figure)"
    return PASS, f"{summary.up}{of} links active{source}", expected


def findings(device: str, summary: Summary, spec: NvLinkSpec | None) -> list[Finding]:
    """The NVLink row, then an ``info`` row for links to GPUs this host cannot see."""
    verdict, reason, expected = decide(summary, spec)
    no_links = not summary.links if spec is None else spec.optional
    if verdict == INFO and summary.up == 0 and no_links:
        return []  # no NVLink, or a bridge card without its bridge: nothing to show
    rows = [Finding("nvml", device, "NVLink", verdict, reason, summary.up, "links",
                    None if verdict == INFO else expected, details=summary.as_details())]
    if summary.unseen:
        rows.append(Finding(
            "nvml", device, "NVLink peers", INFO,
            f"{summary.unseen} of its {summary.up} links up lead to a GPU this host cannot "
            "see (another VM's, or one hidden from this container): not judged here",
            summary.unseen, "links"))
    return rows


def from_watch(device: str, watch: GpuWatch, spec: NvLinkSpec | None,
               visible_gpus: int) -> Finding | None:
    """A GPU's NVLink row from its own facts alone, by the one rule (:func:`decide`).

    For callers without the topology graph (every link's peer taken to be visible); the
    battery passes the graph, so links to GPUs this host cannot see are set apart there.
    """
    facts = watch.facts
    majors = [v[0] for v in (nvlink_version(x) for x in facts.nvlink_versions) if v is not None]
    summary = Summary(
        facts.nvlink_links or facts.nvlink_active or 0, facts.nvlink_active or 0, 0,
        visible_gpus, False, min(majors) if majors else None,
    )
    rows = findings(device, summary, spec)
    return rows[0] if rows else None
