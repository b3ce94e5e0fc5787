"""What joins each pair of GPUs, read once from NVML: NVLinks (direct or via NVSwitch) or PCIe.

A board is not one fabric: an HGX joins every GPU through NVSwitches, a DGX-1 joins some
pairs by two links, some by one and some by none (its hybrid cube mesh), bridged PCIe
cards join only their pair, and a VM may hold part of a board whose other GPUs it cannot
see. So a pair's limit is taken from what NVML says of that pair, never from the board:

* each link's state (``nvmlDeviceGetNvLinkState``), version (``nvmlDeviceGetNvLinkVersion``,
  an ``nvmlNvlinkVersion_t``), what is at its far end (``nvmlDeviceGetNvLinkRemoteDeviceType``:
  ``NVML_NVLINK_DEVICE_TYPE_GPU`` or ``_SWITCH``) and that end's PCI address
  (``nvmlDeviceGetNvLinkRemotePciInfo``, pynvml's wrapper of ``..._v2``);
* per pair, whether the driver will copy over NVLink and read the peer
  (``nvmlDeviceGetP2PStatus`` with ``NVML_P2P_CAPS_INDEX_NVLINK`` and ``_READ``), and the
  closest PCIe node both hang off (``nvmlDeviceGetTopologyCommonAncestor``, an
  ``NVML_TOPOLOGY_*`` level);
* whether the GPU is passed through to a VM (``nvmlDeviceGetVirtualizationMode``,
  ``NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH``): there its board's other GPUs may be elsewhere.

A link whose far end's PCI address is one of this host's GPUs leads to that GPU, whatever
``nvmlDeviceGetNvLinkRemoteDeviceType`` answers: drivers before it existed (it came after
``nvmlDeviceGetNvLinkRemotePciInfo``) still name the address, and a DGX-1's direct links
must not read as switch links. A link to an ``NVML_NVLINK_DEVICE_TYPE_IBMNPU`` (a POWER9
CPU's NVLink) leads to the CPU: not a GPU, not a switch. A link that is up but whose far
end NVML cannot name is taken to lead to an NVSwitch this host cannot see, as NCCL does
(NVIDIA/nccl issue #1182: "in VMs we may not be able to see the NVSwitches"). Every query
that fails reads as None, never an error. The link count is the device's own: the links
for which NVML answers a state, up to ``NVML_NVLINK_MAX_LINKS``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pynvml

from workloads.hardware.nvml import nvlink_version, nvlink_version_text
from workloads.hardware.nvml import read_or_none as _read
from workloads.hardware.nvml_errors import sysfs_bdf

GPU, SWITCH, CPU, UNSEEN = "GPU", "NVSwitch", "CPU", "unseen"

# NVML's PCIe levels (nvmlGpuTopologyLevel_t) in words, for the p2p row's path.
PCIE_PATHS = {
    pynvml.NVML_TOPOLOGY_INTERNAL: "PCIe on one board",
    pynvml.NVML_TOPOLOGY_SINGLE: "PCIe via one PCIe switch",
    pynvml.NVML_TOPOLOGY_MULTIPLE: "PCIe via PCIe switches",
    pynvml.NVML_TOPOLOGY_HOSTBRIDGE: "PCIe via a CPU host bridge",
    pynvml.NVML_TOPOLOGY_NODE: "PCIe via CPU socket",
    pynvml.NVML_TOPOLOGY_SYSTEM: "PCIe across sockets",
}


@dataclass(frozen=True)
class Link:
    """One NVLink of a GPU as NVML reports it."""

    link: int
    up: bool
    version: int | None = None  # nvmlNvlinkVersion_t
    remote: str | None = None  # GPU, NVSwitch, CPU, or UNSEEN (up, far end not named)
    remote_bus: str | None = None  # the far end's PCI address, sysfs form


@dataclass(frozen=True)
class Node:
    """One GPU: its PCI address, its links (those NVML answers for), whether passed through."""

    index: int
    bus: str | None
    links: tuple[Link, ...] = ()
    passthrough: bool = False

    @property
    def up(self) -> list[Link]:
        return [link for link in self.links if link.up]


@dataclass(frozen=True)
class PairFacts:
    """What NVML says of one pair of GPUs (by NVML index)."""

    nvlink_p2p: bool | None  # NVML_P2P_CAPS_INDEX_NVLINK answered NVML_P2P_STATUS_OK
    read_p2p: bool | None  # NVML_P2P_CAPS_INDEX_READ answered NVML_P2P_STATUS_OK
    ancestor: int | None  # NVML_TOPOLOGY_* level


@dataclass(frozen=True)
class Path:
    """What one copy between two GPUs travels over, in words and as a limit's inputs."""

    kind: str  # "nvlink" (direct), "nvswitch", "pcie"
    links: int  # NVLinks the copy can use (direct: between the two; switch: the slower GPU's)
    version: int | None  # nvmlNvlinkVersion_t of those links (the lowest)
    ancestor: int | None
    read_p2p: bool | None = None  # NVML_P2P_CAPS_INDEX_READ: the target may read the source

    def text(self) -> str:
        version = nvlink_version_text(self.version) if self.version is not None else "?"
        if self.kind == "nvlink" and not self.links:
            return f"NVLink {version}, links between them not named by NVML"
        if self.kind == "nvlink":
            return f"{self.links} × NVLink {version}"
        if self.kind == "nvswitch":
            return f"NVLink {version} via NVSwitch ({self.links} links)"
        words = PCIE_PATHS.get(self.ancestor, "PCIe (path unknown)") \
            if self.ancestor is not None else "PCIe (path unknown)"
        return words + (" (no peer reads: staged through host memory)"
                        if self.read_p2p is False else "")


@dataclass
class Topology:
    """Every visible GPU and every pair, as NVML described them when the battery began."""

    nodes: list[Node]
    pairs: dict[tuple[int, int], PairFacts] = field(default_factory=dict)

    def node(self, index: int) -> Node | None:
        return next((n for n in self.nodes if n.index == index), None)

    @property
    def buses(self) -> set[str]:
        return {n.bus for n in self.nodes if n.bus}

    def unseen_peers(self, index: int) -> list[Link]:
        """Links up to a GPU whose address NVML names and is not one of this host's GPUs (a
        GPU link whose address NVML does not give leads to a GPU unknown, not one unseen)."""
        node = self.node(index)
        if node is None:
            return []
        return [link for link in node.up if link.remote == GPU
                and link.remote_bus is not None and link.remote_bus not in self.buses]

    def nvlink_peers(self, index: int) -> int:
        """How many GPUs NVML says ``index`` may copy to over NVLink."""
        return sum(1 for pair, facts in self.pairs.items()
                   if index in pair and facts.nvlink_p2p)

    def path(self, a: int, b: int) -> Path | None:
        """What joins GPUs ``a`` and ``b``; None when either is not in the graph."""
        first, second = self.node(a), self.node(b)
        if first is None or second is None:
            return None
        facts = self.pairs.get((min(a, b), max(a, b)), PairFacts(None, None, None))
        direct = [link for link in first.up if link.remote == GPU and link.remote_bus == second.bus]
        if direct:
            return Path("nvlink", len(direct), _lowest(direct), facts.ancestor)
        unnamed = [[link for link in n.up if link.remote == GPU and link.remote_bus is None]
                   for n in (first, second)]
        if all(unnamed) and facts.nvlink_p2p:  # NVLinks to GPUs NVML gives no address of
            # Each the other's only NVLink peer (a bridged pair): every such link joins them.
            only = all(self.nvlink_peers(n) == 1 for n in (a, b))
            return Path("nvlink", min(map(len, unnamed)) if only else 0,
                        _lowest(unnamed[0] + unnamed[1]), facts.ancestor)
        via = [[link for link in n.up if link.remote in (SWITCH, UNSEEN)] for n in (first, second)]
        if all(via) and facts.nvlink_p2p is not False:
            return Path("nvswitch", min(len(v) for v in via), _lowest(via[0] + via[1]),
                        facts.ancestor)
        return Path("pcie", 0, None, facts.ancestor, facts.read_p2p)


def _lowest(links: list[Link]) -> int | None:
    """The lowest version among ``links`` (the enum ordered by generation, decoded by name)."""
    known = [(nvlink_version(link.version), link.version) for link in links]
    ordered = sorted((decoded, raw) for decoded, raw in known if decoded is not None)
    return ordered[0][1] if ordered else None




def _bus(pci: Any) -> str | None:
    return sysfs_bdf(pci.busId) if pci is not None and hasattr(pci, "busId") else None


def read_links(nvml: Any, handle: Any) -> tuple[Link, ...]:
    """Every link NVML answers a state for (the device's own count), with its far end."""
    links = []
    for index in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = _read(nvml, "nvmlDeviceGetNvLinkState", handle, index)
        if state is None:
            continue
        if state != pynvml.NVML_FEATURE_ENABLED:
            links.append(Link(index, False))
            continue
        kind = _read(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, index)
        remote = {pynvml.NVML_NVLINK_DEVICE_TYPE_GPU: GPU,
                  pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH: SWITCH,
                  pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU: CPU}.get(kind, UNSEEN)
        links.append(Link(
            index, True, _read(nvml, "nvmlDeviceGetNvLinkVersion", handle, index), remote,
            _bus(_read(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, index))))
    return tuple(links)


def _status_ok(nvml: Any, a: Any, b: Any, index: int) -> bool | None:
    status = _read(nvml, "nvmlDeviceGetP2PStatus", a, b, index)
    return None if status is None else status == pynvml.NVML_P2P_STATUS_OK


def read_topology(nvml: Any, count: int | None = None) -> Topology:
    """The graph of this host's GPUs (NVML numbering), read once."""
    total = int(count if count is not None else (_read(nvml, "nvmlDeviceGetCount") or 0))
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(total)]
    nodes = [
        Node(i, _bus(_read(nvml, "nvmlDeviceGetPciInfo", h)), read_links(nvml, h),
             _read(nvml, "nvmlDeviceGetVirtualizationMode", h)
             == pynvml.NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH)
        for i, h in enumerate(handles)
    ]
    buses = {n.bus for n in nodes if n.bus}
    nodes = [replace(n, links=tuple(
        replace(link, remote=GPU) if link.up and link.remote_bus in buses else link
        for link in n.links)) for n in nodes]
    pairs = {
        (a, b): PairFacts(
            _status_ok(nvml, handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_NVLINK),
            _status_ok(nvml, handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_READ),
            _read(nvml, "nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b]),
        )
        for a in range(total) for b in range(a + 1, total)
    }
    return Topology(nodes, pairs)
