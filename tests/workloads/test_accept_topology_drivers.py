"""The topology machines as older drivers and other hosts describe them.

Every machine of :mod:`tests.host.nvml_topologies` again, with what NVML answers changed
as it is on hosts the fixtures do not model: a driver without
``nvmlDeviceGetNvLinkRemoteDeviceType`` (NVML_ERROR_NOT_SUPPORTED for every link, while
``nvmlDeviceGetNvLinkRemotePciInfo`` still names the far end), one where
``nvmlDeviceGetNvLinkRemotePciInfo`` answers NotSupported, and links to a POWER9 CPU
(``pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU``). Verdicts are the battery's own, through
:func:`tests.workloads.test_accept_topology.judge`.
"""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from tests.host import nvml_topologies
from tests.host.fake_nvml import FakeNvml
from tests.host.nvml_topologies import Machine
from tests.workloads.test_accept_topology import MACHINES, judge
from workloads.accept.verdicts import FAIL, INFO, PASS
from workloads.hardware import topology
from workloads.hardware.topology import read_topology


def _without_remote_type(machine: Machine) -> Machine:
    """The driver answers no remote device type (the fake's null reads as NotSupported)."""
    for gpu in machine.readings["gpus"]:
        for remote in gpu["nvlink_remote"]:
            if remote:
                remote["type"] = None
    return machine


@pytest.mark.parametrize("name", MACHINES)
def test_a_driver_without_the_remote_device_type_reads_the_same_paths(name: str) -> None:
    machine = _without_remote_type(nvml_topologies.machines()[list(MACHINES).index(name)])
    nvml_rows, p2p_rows = judge(machine)
    bad = [f for f in nvml_rows + p2p_rows if f.verdict not in (PASS, INFO)]
    assert bad == [], bad
    paths = p2p_rows[0].details["path"]
    for (a, b), (_, _, words) in machine.paths.items():
        assert paths[a][b].startswith(words), (a, b, paths[a][b])


@pytest.mark.parametrize("name", MACHINES)
def test_a_driver_without_the_remote_device_type_still_fails_a_slow_pair(name: str) -> None:
    machine = _without_remote_type(nvml_topologies.machines()[list(MACHINES).index(name)])
    a, b = sorted(machine.paths)[0]
    _, p2p_rows = judge(machine, slow={(a, b): 0.6})
    summary, *named = p2p_rows
    assert summary.verdict == FAIL
    assert [f.device for f in named if f.verdict == FAIL] == [f"GPU {a} → GPU {b}"]


def test_a_link_to_a_power9_cpu_is_neither_a_gpu_nor_a_switch() -> None:
    """Half of each bridged A100's links lead to the CPU's NPU: pairs across it are not
    NVSwitch pairs, whatever the P2P status says."""
    machine = nvml_topologies.bridged(nvml_topologies.A100_PCIE_40GB)
    for gpu in machine.readings["gpus"]:
        for link in range(len(gpu["nvlink_remote"]) // 2):
            gpu["nvlink_remote"][link] = {"type": pynvml.NVML_NVLINK_DEVICE_TYPE_IBMNPU,
                                          "bus": "0000:00:00.0"}
    for pair in machine.readings["pairs"].values():
        pair["nvlink"] = nvml_topologies.OK
    graph = read_topology(FakeNvml(machine.readings))
    kinds = {link.remote for link in graph.nodes[0].up}
    assert topology.GPU in kinds and not kinds & {topology.SWITCH, topology.UNSEEN}, kinds
    path = graph.path(0, 2)
    assert path is not None and path.kind == "pcie"
    direct = graph.path(0, 1)
    assert direct is not None and direct.kind == "nvlink" and direct.links == 6


def _without_remote_address(machine: Machine) -> Machine:
    """``nvmlDeviceGetNvLinkRemotePciInfo`` answers NotSupported (the type still GPU)."""
    for gpu in machine.readings["gpus"]:
        for remote in gpu["nvlink_remote"]:
            if remote:
                remote["bus"] = None
    return machine


@pytest.mark.parametrize("board", [nvml_topologies.A100_PCIE_40GB, nvml_topologies.H100_NVL])
def test_a_bridged_pair_whose_peer_address_nvml_withholds_is_not_called_pcie(board: Any) -> None:
    """The bridged pair is NVLink (P2P over NVLink is OK), its links' far ends are unknown:
    not "a GPU this host cannot see", not a PCIe path; still no healthy pair fails."""
    machine = _without_remote_address(nvml_topologies.bridged(board))
    nvml_rows, p2p_rows = judge(machine)
    assert not [f for f in nvml_rows if f.item == "NVLink peers"]
    assert [f for f in nvml_rows + p2p_rows if f.verdict not in (PASS, INFO)] == []
    paths = p2p_rows[0].details["path"]
    assert paths[0][1].startswith(machine.paths[(0, 1)][2]), paths[0][1]
    assert paths[0][2].startswith("PCIe")


@pytest.mark.parametrize("board", [nvml_topologies.A100_PCIE_40GB, nvml_topologies.H100_NVL])
def test_a_slow_bridged_pair_whose_peer_address_nvml_withholds_still_fails(board: Any) -> None:
    machine = _without_remote_address(nvml_topologies.bridged(board))
    _, p2p_rows = judge(machine, slow={(2, 3): 0.6})
    summary, *named = p2p_rows
    assert summary.verdict == FAIL
    assert [f.device for f in named if f.verdict == FAIL] == ["GPU 2 → GPU 3"]


def test_a_mesh_whose_peer_addresses_nvml_withholds_names_no_link_count() -> None:
    """A DGX-1 joins each GPU to four peers: which links lead where is unknown, so the pair
    is NVLink with no limit (a figure), never a guessed count and never PCIe."""
    machine = _without_remote_address(nvml_topologies.dgx1())
    graph = read_topology(FakeNvml(machine.readings))
    path = graph.path(0, 1)
    assert path is not None and path.kind == "nvlink" and path.links == 0
    assert "not named by NVML" in path.text()
    nvml_rows, _ = judge(machine)
    assert not [f for f in nvml_rows if f.item == "NVLink peers"]
