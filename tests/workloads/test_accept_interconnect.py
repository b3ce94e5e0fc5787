"""The all-reduce's limit and the NVLink rows, on boards built from NVIDIA's own definitions.

Each board's NVML readings come from :mod:`tests.host.nvml_boards`: every link recorded as
the ``nvmlNvlinkVersion_t`` its GPU reports (pynvml's named constants), device IDs from
the PCI ID repository. NVML's enum is not the NVLink generation (an A100 reports
``NVML_NVLINK_VERSION_3_1``, whose value is 5): the limits here are the boards' own.
"""

from __future__ import annotations

from typing import Any, cast

import pynvml
import pytest

from tests.host import nvml_boards
from tests.host.fake_nvml import FakeNvml
from workloads.accept import checks, links
from workloads.accept.checks import Sizes, Target
from workloads.accept.kernels import Device, Kernels
from workloads.accept.verdicts import FAIL, INFO, PASS
from workloads.hardware.nvml import Watcher, nvlink_version, nvlink_version_text
from workloads.hardware.reference import load

# (board, per-GPU per-direction NVLink GB/s its datasheet gives: links × per-link rate)
BOARDS = [
    pytest.param(nvml_boards.A100_SXM4_80GB, 300.0, id="A100 SXM4: 12 links x 25 GB/s"),
    pytest.param(nvml_boards.H100_SXM5_80GB, 450.0, id="H100 SXM5: 18 links x 25 GB/s"),
    pytest.param(nvml_boards.H200_SXM, 450.0, id="H200 SXM: 18 links x 25 GB/s"),
    pytest.param(nvml_boards.B200, 900.0, id="B200: 18 links x 50 GB/s"),
]


def _targets(readings: dict[str, Any]) -> list[Target]:
    watcher = Watcher(FakeNvml(readings))
    reference = load()
    return [
        Target(
            Device("GPU", w.facts.index, w.facts.name, None),
            w,
            reference.model_for(w.facts.pci_device_id),
        )
        for w in watcher.gpus
    ]


def test_nvlink_versions_are_decoded_by_their_names() -> None:
    assert nvlink_version(pynvml.NVML_NVLINK_VERSION_3_1) == (3, 1)
    assert nvlink_version(pynvml.NVML_NVLINK_VERSION_4_0) == (4, 0)
    assert nvlink_version(pynvml.NVML_NVLINK_VERSION_5_0) == (5, 0)
    assert nvlink_version(pynvml.NVML_NVLINK_VERSION_INVALID) is None
    assert nvlink_version_text(pynvml.NVML_NVLINK_VERSION_2_2) == "2.2"
    assert "unknown" in nvlink_version_text(999)


@pytest.mark.parametrize(("board", "expected"), BOARDS)
def test_each_board_s_interconnect_limit_is_its_datasheet_s(
    board: nvml_boards.Board, expected: float
) -> None:
    targets = _targets(nvml_boards.healthy(board, 8))
    assert all(t.model is not None for t in targets), "the board is not in the table"
    limit, source, threshold = checks.interconnect_limit(targets, load())
    assert limit == pytest.approx(expected)
    assert threshold == "allreduce_nvlink"
    assert source.startswith(f"NVLink {targets[0].model.nvlink.generation} ×")  # type: ignore[union-attr]


@pytest.mark.parametrize(("board", "_"), BOARDS)
def test_every_board_s_links_pass_their_nvml_row(board: nvml_boards.Board, _: float) -> None:
    targets = _targets(nvml_boards.healthy(board, 8))
    for target in targets:
        assert target.model is not None and target.watch is not None
        row = links.from_watch(target.label, target.watch, target.model.nvlink, 8)
        assert row is not None and row.verdict == PASS, row


class FixedAllReduce:
    """The backend interface's all-reduce, timed so that busbw comes out at ``busbw`` GB/s."""

    backend = "recorded"

    def __init__(self, ranks: int, busbw: float) -> None:
        self.ranks, self.busbw = ranks, busbw

    def collective_devices(self) -> list[int]:
        return list(range(self.ranks))

    def allreduce_time(self, nbytes: int, iterations: int) -> float:
        algbw = self.busbw * self.ranks / (2 * (self.ranks - 1))
        return nbytes / (algbw * 1e9)


def _sizes() -> Sizes:
    return Sizes(8192, 1, 1, 1, 1, 1, 1, 1, (1 << 20, 1 << 30), 1, 1, 1, 1)


@pytest.mark.parametrize(
    ("board", "busbw", "verdict"),
    [
        # nccl-tests #149: about 230 GB/s on a healthy 8x A100 with NVLink
        (nvml_boards.A100_SXM4_80GB, 230.0, PASS),
        # nccl-tests #212/#290: about 370 GB/s with the ring on a healthy 8x H100 SXM
        (nvml_boards.H100_SXM5_80GB, 370.0, PASS),
        (nvml_boards.H200_SXM, 370.0, PASS),
        # half the fabric's rate: a fault on any board
        (nvml_boards.H100_SXM5_80GB, 200.0, FAIL),
        (nvml_boards.B200, 400.0, FAIL),
    ],
)
def test_all_reduce_verdicts_on_real_boards(
    board: nvml_boards.Board, busbw: float, verdict: str
) -> None:
    targets = _targets(nvml_boards.healthy(board, 8))
    findings = checks.check_allreduce(
        cast(Kernels, FixedAllReduce(8, busbw)), targets, _sizes(), load(), lambda _: None
    )
    best = findings[-1]
    assert best.item.startswith("best busbw")
    assert best.verdict == verdict, best.reason


def test_an_h100_that_reports_nvlink_5_is_still_held_to_its_board() -> None:
    """Some drivers report ``NVML_NVLINK_VERSION_5_0`` on H100s: the board's table decides."""
    readings = nvml_boards.healthy(nvml_boards.H100_SXM5_80GB, 8)
    for gpu in readings["gpus"]:
        gpu["nvlink"] = [pynvml.NVML_NVLINK_VERSION_5_0] * 18
    limit, _, _ = checks.interconnect_limit(_targets(readings), load())
    assert limit == pytest.approx(450.0)


def test_a_gpu_not_in_the_table_is_held_to_the_version_nvml_names() -> None:
    readings = nvml_boards.healthy(nvml_boards.A100_SXM4_80GB, 2)
    targets = [Target(t.device, t.watch, None) for t in _targets(readings)]
    limit, source, _ = checks.interconnect_limit(targets, load())
    assert limit == pytest.approx(12 * 25.0) and source.startswith("NVLink 3 ×")


def test_one_visible_gpu_with_its_links_down_is_not_a_fabric_failure() -> None:
    """One H200 passed to a VM: no peer to train its NVLinks with (the first real GPU run)."""
    readings = nvml_boards.healthy(nvml_boards.H200_SXM, 1)
    readings["gpus"][0]["nvlink"] = [pynvml.NVML_NVLINK_VERSION_INVALID] * 18
    (target,) = _targets(readings)
    assert target.model is not None and target.watch is not None
    alone = links.from_watch(target.label, target.watch, target.model.nvlink, 1)
    assert alone is not None and alone.verdict == INFO
    assert "only one visible" in alone.reason
    with_peers = links.from_watch(target.label, target.watch, target.model.nvlink, 8)
    assert with_peers is not None and with_peers.verdict == FAIL


def test_one_visible_gpu_with_a_link_down_still_fails() -> None:
    readings = nvml_boards.healthy(nvml_boards.H100_SXM5_80GB, 1)
    readings["gpus"][0]["nvlink"][3] = pynvml.NVML_NVLINK_VERSION_INVALID
    (target,) = _targets(readings)
    assert target.model is not None and target.watch is not None
    row = links.from_watch(target.label, target.watch, target.model.nvlink, 1)
    assert row is not None and row.verdict == FAIL and "17 of 18" in row.reason
