"""Topology read from NVML, on the machines operators run: each passes healthy, fails each fault.

The machines (:mod:`tests.host.nvml_topologies`) are built from pynvml's constants and
pci.ids: an HGX H100 (NVSwitch), 2- and 4-GPU slices of it in a VM (with and without a
Fabric Manager partition), 4x H100 NVL and 4x A100 PCIe with bridged pairs, a DGX-1's
hybrid cube mesh and 8x L40S on PCIe. Every pair copies at 80 % of its own path's limit
(the links between the two × their per-link rate, the GPU's NVSwitch rate, or the slower
PCIe link) through the copy engine over a simulated CUDA driver; the verdicts are the
battery's own (``nvml_findings`` and ``check_p2p``).
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from tests.host import nvml_topologies
from tests.host.fake_cuda_driver import FakeCudaDriver
from tests.host.fake_nvml import FakeNvml
from tests.host.nvml_topologies import Machine
from workloads.accept import battery, p2p
from workloads.accept.checks import Sizes, Target
from workloads.accept.kernels import Device, Kernels
from workloads.accept.verdicts import FAIL, INFO, PASS, WARN, Finding, worst
from workloads.hardware.copy_engine import CopyEngine, PeerCopy
from workloads.hardware.nvml import Watcher
from workloads.hardware.reference import load

MIB = 1 << 20
MACHINES = {m.name: m for m in nvml_topologies.machines()}
HEALTHY_SHARE = 0.80


class EngineKernels:
    """The backend interface's pair copies, through the copy engine over a simulated driver."""

    backend = "recorded"

    def __init__(self, driver: FakeCudaDriver, targets: list[Target]) -> None:
        self.engine = CopyEngine(driver)
        self.targets = targets

    def peer_devices(self) -> list[Device]:
        return [t.device for t in self.targets]

    def peer_rate(self, source: Device, target: Device, nbytes: int, repeats: int) -> PeerCopy:
        return self.engine.peer(source.index, target.index, nbytes, repeats)


def _sizes() -> Sizes:
    return Sizes(8192, 1, 1, 1, 1, 1, 1, 1, (MIB,), 1, 1, 1, 1, 4 * MIB, 3, 8192)


def expected_limit(machine: Machine, a: int, b: int) -> float:
    """The pair's limit from the machine's own map and the reference table's rates."""
    reference = load()
    kind, links, _ = machine.paths[(min(a, b), max(a, b))]
    if kind == "pcie":
        rate = reference.pcie_gbps(machine.board.pcie_generation, 16)
    else:
        generation = {"1": 1, "2": 2, "3": 3, "4": 4}[machine.paths[(min(a, b), max(a, b))][2]
                                                       .split("NVLink ")[1][0]]
        rate = reference.nvlink_gbps(generation, links)
    assert rate is not None
    return rate


def judge(machine: Machine, slow: dict[tuple[int, int], float] | None = None,
          **driver_faults: Any) -> tuple[list[Finding], list[Finding]]:
    """(the NVML rows, the p2p rows) of ``machine`` with every pair at 80 % of its limit."""
    watcher = Watcher(FakeNvml(machine.readings))
    reference = load()
    targets = [Target(Device("GPU", w.facts.index, w.facts.name, None), w,
                      reference.model_for(w.facts.pci_device_id), watcher.topology)
               for w in watcher.gpus]
    watcher.sample_once()
    watcher.sample_once()
    watcher.sample_once()
    n = machine.count
    rates = {(a, b): HEALTHY_SHARE * expected_limit(machine, a, b) * (slow or {}).get((a, b), 1)
             for a in range(n) for b in range(n) if a != b}
    driver = FakeCudaDriver(gpus=n, peer_gbps=rates, peer_access=set(rates), **driver_faults)
    kernels = cast(Kernels, EngineKernels(driver, targets))  # the pair copies are all it uses
    rows = p2p.check_p2p(kernels, targets, _sizes(), reference, lambda _: None)
    return battery.nvml_findings(watcher, targets, reference), rows


@pytest.mark.parametrize("name", MACHINES)
def test_a_healthy_machine_passes_and_each_p2p_pair_names_its_path(name: str) -> None:
    machine = MACHINES[name]
    nvml_rows, p2p_rows = judge(machine)
    bad = [f for f in nvml_rows + p2p_rows if f.verdict not in (PASS, INFO)]
    assert bad == [], bad
    [summary] = p2p_rows
    assert summary.verdict == PASS
    paths, limits = summary.details["path"], summary.details["limit_gbps"]
    for (a, b), (_, _, words) in machine.paths.items():
        for i, j in ((a, b), (b, a)):
            assert paths[i][j].startswith(words), (i, j, paths[i][j])
            assert limits[i][j] == pytest.approx(expected_limit(machine, a, b))


@pytest.mark.parametrize("name", MACHINES)
def test_a_link_down_fails(name: str) -> None:
    broken = MACHINES[name].faults["link down"]()
    nvml_rows, p2p_rows = judge(broken)
    failed = [f for f in nvml_rows + p2p_rows if f.verdict == FAIL]
    assert failed, broken.name
    assert any(f.item in ("NVLink", "PCIe link") for f in failed), failed


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("which", range(3))
def test_one_pair_40_percent_slow_fails_and_is_named(name: str, which: int) -> None:
    machine = MACHINES[name]
    pairs = sorted(machine.paths)
    a, b = pairs[(which * 7) % len(pairs)]
    _, p2p_rows = judge(machine, slow={(a, b): 0.6})
    summary, *named = p2p_rows
    assert summary.verdict == FAIL
    assert [f.device for f in named if f.verdict == FAIL] == [f"GPU {a} → GPU {b}"]


def test_a_slice_without_its_fabric_says_why_its_links_are_not_judged() -> None:
    nvml_rows, _ = judge(nvml_topologies.hgx_h100(2, vm=True))
    links = [f for f in nvml_rows if f.item == "NVLink"]
    assert len(links) == 2 and {f.verdict for f in links} == {INFO}
    assert all("passed through to a VM" in f.reason for f in links)


def test_the_same_board_on_bare_metal_with_every_link_down_fails() -> None:
    """Not passed through and not alone: links down are a fault, not the setup."""
    machine = nvml_topologies.hgx_h100(8)
    for gpu in machine.readings["gpus"]:
        gpu["nvlink"] = [nvml_topologies.INVALID] * len(gpu["nvlink"])
    nvml_rows, _ = judge(machine)
    assert {f.verdict for f in nvml_rows if f.item == "NVLink"} == {FAIL}


def test_a_link_to_a_gpu_this_host_cannot_see_is_an_info_row() -> None:
    """Four GPUs of a DGX-1 in a VM: GPU 0's two links to GPU 4 lead out of the VM."""
    full = nvml_topologies.dgx1()
    machine = Machine("4 GPUs of a DGX-1", full.board,
                      {"gpus": full.readings["gpus"][:4],
                       "pairs": {k: v for k, v in full.readings["pairs"].items()
                                 if max(map(int, k.split(","))) < 4}},
                      {k: v for k, v in full.paths.items() if max(k) < 4})
    nvml_rows, p2p_rows = judge(machine)
    peers = [f for f in nvml_rows if f.item == "NVLink peers"]
    assert [f.device for f in peers] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]
    assert all(f.verdict == INFO and "cannot see" in f.reason for f in peers)
    assert worst(f.verdict for f in nvml_rows + p2p_rows) == PASS


@pytest.mark.parametrize("name", ["HGX H100 8-GPU", "DGX-1 V100 (hybrid cube mesh)",
                                  "8x L40S, two sockets"])
@pytest.mark.parametrize(("share", "verdict"), [(0.6, WARN), (0.3, FAIL)])
def test_a_pair_whose_slowest_copy_is_far_below_its_median_is_named_intermittent(
    name: str, share: float, verdict: str
) -> None:
    """The median (nvbandwidth's figure) stays healthy; the slowest repetition names the link."""
    machine = MACHINES[name]
    factors = {(1, 2): [1.0, 1.0, share, 1.0]}  # the warm-up, then three timed copies
    _, p2p_rows = judge(machine, peer_factors=factors)
    summary, *named = p2p_rows
    assert summary.verdict == verdict
    [row] = named
    assert row.device == "GPU 1 → GPU 2" and row.verdict == verdict
    assert row.reason.startswith("intermittent: its slowest of 3 copies")
    assert row.value == pytest.approx(HEALTHY_SHARE * expected_limit(machine, 1, 2))


def test_a_pair_whose_copied_bytes_differ_fails_whatever_its_speed() -> None:
    _, p2p_rows = judge(MACHINES["HGX H100 8-GPU"], corrupt={(3, 6)})
    summary, *named = p2p_rows
    assert summary.verdict == FAIL
    assert [(f.device, f.verdict) for f in named] == [("GPU 3 → GPU 6", FAIL)]
    assert "copied bytes differ" in named[0].reason
    assert summary.details["verified"][3][6] is False and summary.details["verified"][6][3]


def test_figures_without_a_limit_are_not_held_to_each_other() -> None:
    """Logical CPU devices (no NVML): a slow direction and a jittery copy stay figures."""
    devices = [Device("CPU device", i, "CPU", None) for i in range(2)]
    driver = FakeCudaDriver(gpus=2, peer_gbps={(0, 1): 20.0, (1, 0): 5.0},
                            peer_access={(0, 1), (1, 0)}, peer_factors={(0, 1): [1, 1, 0.2, 1]})
    targets = [Target(d) for d in devices]
    kernels = cast(Kernels, EngineKernels(driver, targets))
    [summary] = p2p.check_p2p(kernels, targets, _sizes(), load(), lambda _: None)
    assert summary.verdict == INFO


def test_a_pcie_pair_nvml_will_not_let_read_its_peer_says_so() -> None:
    machine = nvml_topologies.l40s()
    pynvml_status = nvml_topologies.NO
    machine.readings["pairs"]["0,5"]["read"] = pynvml_status
    _, p2p_rows = judge(machine)
    paths = p2p_rows[0].details["path"]
    assert paths[0][5].startswith("PCIe across sockets (no peer reads: staged through host memory)")
    assert "no peer reads" not in paths[0][4]


def test_a_board_whose_links_no_document_counts_is_judged_by_its_graph() -> None:
    """HGX H100 SXM5 94GB (0x2339): no sourced link count, so NVML's links and graph decide."""
    from dataclasses import replace as with_

    from tests.host import nvml_boards
    from workloads.accept import checks

    board = with_(nvml_boards.H100_SXM5_80GB, nvml_name="NVIDIA H100 94GB HBM2e",
                  pci_product="H100 SXM5 94GB")
    machine = nvml_topologies.hgx_h100(8)
    for i, gpu in enumerate(machine.readings["gpus"]):
        fresh = nvml_boards.gpu(board, i)
        gpu.update(name=fresh["name"], pci_device_id=fresh["pci_device_id"])
    machine.board = board
    nvml_rows, p2p_rows = judge(machine)
    assert {f.verdict for f in nvml_rows if f.item == "NVLink"} == {PASS}
    assert all("no sourced figure" in f.reason for f in nvml_rows if f.item == "NVLink")
    assert p2p_rows[0].verdict == PASS
    watcher = Watcher(FakeNvml(machine.readings))
    targets = [Target(Device("GPU", w.facts.index, w.facts.name, None), w,
                      load().model_for(w.facts.pci_device_id), watcher.topology)
               for w in watcher.gpus]
    assert targets[0].model is not None and targets[0].model.nvlink is None
    limit, _, threshold = checks.interconnect_limit(targets, load())
    assert threshold == "allreduce_nvlink" and limit == pytest.approx(450.0)


def test_the_drawn_matrix_counts_the_pairs_of_each_path() -> None:
    from rich.console import Console

    from workloads.accept.output import p2p_matrix

    _, p2p_rows = judge(MACHINES["DGX-1 V100 (hybrid cube mesh)"])
    console = Console(width=200, record=True)
    console.print(p2p_matrix(p2p_rows[0]))
    text = " ".join(console.export_text().split())  # the caption wraps at the table's width
    assert "1 × NVLink 2.0: 16 pairs; 2 × NVLink 2.0: 16 pairs; PCIe across sockets: 24 pairs" \
        in text
