"""The GPU-pair matrix and the soak, on boards built from NVIDIA's definitions.

The boards' NVML readings come from :mod:`tests.host.nvml_boards` (pynvml's constants,
pci.ids); the copies from a simulated CUDA driver with cuda-bindings' names
(:mod:`tests.host.fake_cuda_driver`), whose per-pair rates a test sets: a healthy HGX H100
copies about 380 GB/s between any two GPUs (nccl #1264), one bad link less. The soak's
products come from a recorded backend in which one device computes a wrong answer. The
real backends run both checks on this machine's logical CPU devices in
``test_accept_cli.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.host import nvml_boards
from tests.host.fake_cuda_driver import FakeCudaDriver
from tests.host.fake_nvml import FakeNvml
from workloads.accept import memfill, p2p, soak
from workloads.accept.checks import Sizes, Target
from workloads.accept.kernels import Device, SoakRun
from workloads.accept.output import p2p_matrix
from workloads.accept.verdicts import FAIL, PASS, SKIP, WARN
from workloads.hardware.copy_engine import CopyEngine, PeerCopy
from workloads.hardware.nvml import GpuWatch, Sample, Watcher
from workloads.hardware.reference import load

MIB = 1 << 20


def _targets(board: nvml_boards.Board, count: int) -> list[Target]:
    watcher = Watcher(FakeNvml(nvml_boards.healthy(board, count)))
    return [
        Target(Device("GPU", w.facts.index, w.facts.name, None), w,
               load().model_for(w.facts.pci_device_id))
        for w in watcher.gpus
    ]


def _sizes() -> Sizes:
    return Sizes(8192, 1, 1, 1, 1, 1, 1, 1, (MIB,), 1, 1, 1, 1, 64 * MIB, 2, 8192)


class EngineKernels:
    """The backend interface's pair copies, through the copy engine over a simulated driver."""

    backend = "recorded"

    def __init__(self, driver: FakeCudaDriver, targets: list[Target]) -> None:
        self.engine = CopyEngine(driver)
        self.targets = targets

    def peer_devices(self) -> list[Device]:
        return [t.device for t in self.targets]

    def peer_rate(
        self, source: Device, target: Device, nbytes: int, repeats: int
    ) -> PeerCopy:
        return self.engine.peer(source.index, target.index, nbytes, repeats)


def _hgx(rates: dict[tuple[int, int], float], access: set[tuple[int, int]] | None = None,
         board: nvml_boards.Board = nvml_boards.H100_SXM5_80GB) -> tuple[Any, list[Target]]:
    pairs = {(i, j) for i in range(8) for j in range(8) if i != j}
    driver = FakeCudaDriver(
        gpus=8,
        peer_gbps={pair: rates.get(pair, 380.0) for pair in pairs},
        peer_access=pairs if access is None else access,
        staged_gbps=20.0,
    )
    targets = _targets(board, 8)
    return EngineKernels(driver, targets), targets


def test_a_healthy_hgx_h100_passes_every_pair() -> None:
    kernels, targets = _hgx({})
    [summary] = p2p.check_p2p(kernels, targets, _sizes(), load(), lambda _: None)
    assert summary.verdict == PASS and summary.limit == pytest.approx(450.0)
    assert summary.details["labels"] == [f"GPU {i}" for i in range(8)]
    assert summary.details["gbps"][0][0] is None
    assert summary.details["gbps"][0][1] == pytest.approx(380.0)
    assert kernels.engine.driver.released()


def test_one_bad_link_is_named_by_its_two_gpus() -> None:
    kernels, targets = _hgx({(2, 5): 150.0, (5, 2): 290.0})
    summary, *pairs = p2p.check_p2p(kernels, targets, _sizes(), load(), lambda _: None)
    assert summary.verdict == FAIL
    assert summary.reason.startswith("slowest pair GPU 2 → GPU 5 150.0 GB/s")
    assert [(f.device, f.verdict) for f in pairs] == [("GPU 2 → GPU 5", FAIL),
                                                      ("GPU 5 → GPU 2", WARN)]
    assert "the link between GPU 2 and GPU 5" in pairs[0].reason
    assert summary.details["verdict"][2][5] == FAIL and summary.details["verdict"][5][2] == WARN
    assert summary.details["verdict"][0][1] == PASS and summary.details["verdict"][1][1] is None
    assert "2 pair(s) below their line: GPU 2 → GPU 5 150, GPU 5 → GPU 2 290 GB/s" in (
        summary.reason)


def test_a_pair_without_peer_access_on_an_nvlink_board_fails() -> None:
    everything = {(i, j) for i in range(8) for j in range(8) if i != j}
    kernels, targets = _hgx({}, access=everything - {(3, 6)})
    _, *pairs = p2p.check_p2p(kernels, targets, _sizes(), load(), lambda _: None)
    assert [(f.device, f.verdict) for f in pairs] == [("GPU 3 → GPU 6", FAIL)]
    assert "no direct peer access" in pairs[0].reason


def test_an_a100_board_is_held_to_its_own_links() -> None:
    """Crusoe's A100 floor, 220 GB/s, is 73 % of an A100 SXM's 300: a pass; 180 warns."""
    kernels, targets = _hgx({(0, 1): 180.0}, board=nvml_boards.A100_SXM4_80GB)
    rates = {pair: 220.0 for pair in [(i, j) for i in range(8) for j in range(8) if i != j]}
    kernels.engine.driver.peer_gbps.update({k: v for k, v in rates.items() if k != (0, 1)})
    summary, *pairs = p2p.check_p2p(kernels, targets, _sizes(), load(), lambda _: None)
    assert summary.limit == pytest.approx(300.0)
    assert [(f.device, f.verdict) for f in pairs] == [("GPU 0 → GPU 1", WARN)]


def test_the_matrix_is_drawn_with_its_bad_pair() -> None:
    from rich.console import Console

    kernels, targets = _hgx({(2, 5): 150.0})
    summary, *_ = p2p.check_p2p(kernels, targets, _sizes(), load(), lambda _: None)
    console = Console(width=200, record=True)
    console.print(p2p_matrix(summary))
    text = console.export_text()
    assert "from \\ to" in text and text.count("380") == 55 and "150" in text


def test_one_device_has_no_pair() -> None:
    kernels, targets = _hgx({})
    kernels.targets = targets[:1]
    [row] = p2p.check_p2p(kernels, targets[:1], _sizes(), load(), lambda _: None)
    assert row.verdict == SKIP


# --- the soak ----------------------------------------------------------------------------


def planted_memory(
    plans: dict[str, memfill.Plan] | None, flipped_from: dict[str, int] | None = None,
    passes: int = 12,
) -> dict[str, memfill.Fill]:
    """Each device's memory coverage as a healthy device reads it back, every pass the host's
    closed form; a device in ``flipped_from`` reads back bit 7 flipped from that pass on."""
    fills = {}
    for label, plan in (plans or {}).items():
        fill = memfill.Fill(plan, plan.nbytes)
        for p in range(passes):
            fill.seeds.append(memfill.seed(p + 1))
            good = memfill.expected(fill.seeds[-1], fill.elements)
            bad = p >= (flipped_from or {}).get(label, passes)
            fill.sums.append(good ^ 1 << 7 if bad else good)
        fills[label] = fill
    return fills


class PlantedSoak:
    """Checksums of a soak in which chosen devices compute wrong answers (and a backend that
    reports half of an 80 GiB device free, as JAX's ``memory_stats`` would)."""

    def __init__(self, wrong_from: dict[str, int], differs: set[str] | None = None) -> None:
        self.wrong_from, self.differs = wrong_from, differs or set()

    def memory_stats(self, device: Device) -> tuple[int, int] | None:
        return 40 << 30, 80 << 30

    def soak_checksums(
        self, devices: list[Device], size: int, seconds: float,
        fill: dict[str, memfill.Plan] | None = None,
    ) -> SoakRun:
        sums = {}
        for device in devices:
            good = 0xBEEF if device.label not in self.differs else 0xDEAD
            start = self.wrong_from.get(device.label, 10**9)
            sums[device.label] = [good if i < start else good ^ 1 << 17 for i in range(40)]
        return SoakRun(sums, seconds, size, memory=planted_memory(fill))


def _soak(kernels: Any, targets: list[Target]) -> list[Any]:
    return soak.check_soak(kernels, targets, _sizes(), 300.0, load(), lambda _: None)


def test_a_healthy_soak_passes_every_device() -> None:
    rows = _soak(PlantedSoak({}), _targets(nvml_boards.H100_SXM5_80GB, 8))
    assert {r.verdict for r in rows} == {PASS} and len(rows) == 16
    assert [r.item for r in rows] == ["results"] * 8 + ["memory"] * 8
    assert "identical to the first, and to its siblings'" in rows[0].reason


def test_a_wrong_product_later_in_the_soak_is_named_with_its_iteration() -> None:
    rows = _soak(PlantedSoak({"GPU 3": 27}), _targets(nvml_boards.H100_SXM5_80GB, 8))
    bad = [r for r in rows if r.verdict == FAIL]
    assert [r.device for r in bad] == ["GPU 3"]
    assert "13 of 40 products differ from the first (iteration 28 first)" in bad[0].reason


def test_a_device_whose_products_differ_from_its_siblings_is_named() -> None:
    rows = _soak(PlantedSoak({}, differs={"GPU 6"}), _targets(nvml_boards.H100_SXM5_80GB, 8))
    assert [r.device for r in rows if r.verdict == FAIL] == ["GPU 6"]


def test_two_devices_that_disagree_are_both_named() -> None:
    rows = _soak(PlantedSoak({}, differs={"GPU 1"}), _targets(nvml_boards.H100_SXM5_80GB, 2))
    assert {r.device for r in rows if r.verdict == FAIL} == {"GPU 0", "GPU 1"}


def _samples(clock_at: list[tuple[float, int, int]]) -> list[Sample]:
    return [Sample(t, 99, mhz, 2619, 4, 650.0, temp, 5, 16) for t, mhz, temp in clock_at]


@pytest.mark.parametrize(
    ("late_mhz", "verdict"), [(1755, PASS), (1560, WARN), (1200, FAIL)]
)
def test_a_clock_that_sags_as_the_card_heats_is_a_finding(late_mhz: int, verdict: str) -> None:
    target = _targets(nvml_boards.H100_SXM5_80GB, 1)[0]
    assert target.watch is not None
    watch = GpuWatch(target.watch.facts, _samples(
        [(t, 1755, 55) for t in (10.0, 20.0, 30.0)]
        + [(t, 1700, 70) for t in (100.0, 150.0)]
        + [(t, late_mhz, 88) for t in (260.0, 280.0, 300.0)]
    ))
    row = soak.clock_sag("GPU 0", watch, 0.0, 300.0, load().thresholds["soak_clocks"])
    assert row.verdict == verdict
    assert row.reason.startswith(f"median 1,755 MHz in the first fifth, {late_mhz:,} MHz")
    assert "55 → 88 °C" in row.reason
