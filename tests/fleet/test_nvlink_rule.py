"""The fleet report judges NVLinks by the battery's own rule (``workloads.accept.links``).

A record's NVLink row is read back into the rule's inputs: those a current battery wrote
into the row's details, or, for an older record, its figures and the GPUs it lists. So the
H200 VM record in ``shared/reference/gpu-h200`` (one GPU of an HGX board passed into a VM,
its row written as "fail: no NVLink active of the board's 18" by a battery before the rule)
is not failed for links it had no peer to train; a bare-metal host with links down still is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.records import finding, record, write
from workloads.accept import links
from workloads.fleet.command import render_fleet

OLD_REASON = ("no NVLink active of the board's 18: GPU-to-GPU traffic falls back to PCIe; "
              "check Fabric Manager (systemctl status nvidia-fabricmanager) and "
              "`nvidia-smi nvlink -s`")


def _old_vm_record(host: str, gpus: int) -> dict[str, Any]:
    """As the battery before the rule wrote it for GPUs of a board in a VM: links down, fail."""
    rec = record(host, gpus=gpus, model="NVIDIA H200")
    rec["findings"] += [finding("nvml", f"GPU {i}", "NVLink", 0, unit="links", limit=18,
                                verdict="fail", reason=OLD_REASON) for i in range(gpus)]
    return rec


def _current_row(device: str, summary: links.Summary) -> dict[str, Any]:
    [row, *_] = links.findings(device, summary, None)
    return row.as_dict()


def _verdicts(tmp_path: Path, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    run = write(tmp_path / "run", records)
    render_fleet(run, None)
    report = json.loads((run / "report" / "fleet.json").read_text())
    return {h["host"]: h for h in report["hosts"]}


def test_the_h200_vm_record_is_not_failed_for_its_links(tmp_path: Path) -> None:
    hosts = _verdicts(tmp_path, [_old_vm_record("h200", 1)])
    assert not [r for r in hosts["h200"]["reasons"] if "NVLink" in r]
    assert hosts["h200"]["verdict"] == "pass"


@pytest.mark.parametrize("gpus", [2, 4])
def test_a_slice_passed_into_a_vm_is_not_failed_for_its_links(tmp_path: Path, gpus: int) -> None:
    rec = record("slice", gpus=gpus, model="NVIDIA H100 80GB HBM3")
    rec["findings"] += [_current_row(f"GPU {i}", links.Summary(18, 0, 0, gpus, True))
                        for i in range(gpus)]
    hosts = _verdicts(tmp_path, [rec])
    assert hosts["slice"]["verdict"] == "pass", hosts["slice"]["reasons"]


@pytest.mark.parametrize("gpus", [2, 8])
def test_bare_metal_links_down_still_fail_in_one_line(tmp_path: Path, gpus: int) -> None:
    rec = record("metal", gpus=gpus)
    rec["findings"] += [_current_row(f"GPU {i}", links.Summary(18, 0, 0, gpus, False))
                        for i in range(gpus)]
    hosts = _verdicts(tmp_path, [rec])
    nvlink = [r for r in hosts["metal"]["reasons"] if "NVLink" in r]
    assert hosts["metal"]["verdict"] == "fail" and len(nvlink) == 1, nvlink
    assert nvlink[0].startswith("fail: NVLink: 0 of 18 links up on")


def test_a_link_down_in_a_partition_fails(tmp_path: Path) -> None:
    rec = record("partition", gpus=4)
    rec["findings"] += [_current_row(f"GPU {i}", links.Summary(18, 17 if i == 2 else 18, 0, 4,
                                                                True)) for i in range(4)]
    hosts = _verdicts(tmp_path, [rec])
    assert [r for r in hosts["partition"]["reasons"] if "NVLink" in r] == [
        "fail: NVLink: 17 of 18 links up on GPU 2"]


def test_the_battery_and_the_report_read_one_summary() -> None:
    """What the battery writes into the row is what the report reads back."""
    for summary in (links.Summary(18, 0, 0, 1), links.Summary(6, 6, 2, 4, True, 2),
                    links.Summary(12, 11, 0, 4, False, 4)):
        row = _current_row("GPU 0", summary)
        assert links.summary_from_row(row, visible_gpus=99) == summary
