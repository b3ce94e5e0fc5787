"""The quick check's free signals on the NVML stand-in: inactive NVLinks, clock event reasons,
PCIe link width and generation, the GPU count against --expect-gpus.

The stand-in (``tests/host/fake_nvml.py``) answers with pynvml's own constants: a link that is
down is recorded as ``pynvml.NVML_NVLINK_VERSION_INVALID``, the clock event reasons are OR-ed
``pynvml.nvmlClocksEventReason*`` bits (every named bit pynvml has is walked), the PCIe maxima are
per-GPU facts and the current link a reading. The node is ``tests/workloads/test_health.py``'s.
"""

from __future__ import annotations

import functools
import json
import operator
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.workloads import test_health
from tests.workloads.test_accept_errors import zero_links
from tests.workloads.test_health import gpus, health, rows
from workloads.accept.health import nvlink5

node = test_health.node  # the two-GPU node fixture
LINKS = 18  # an H100 SXM's NVLinks (the stand-in's board)

REASON_BITS = {
    name.removeprefix("nvmlClocksEventReason"): int(getattr(pynvml, name))
    for name in dir(pynvml)
    if name.startswith("nvmlClocksEventReason") and name not in (
        "nvmlClocksEventReasonAll", "nvmlClocksEventReasonNone")
}
FAILING = {"HwThermalSlowdown", "HwPowerBrakeSlowdown"}
# HW slowdown alone warns: NVML documents it "may be also reported during PState or clock
# change" (nvmlClocksEventReasonHwSlowdown), so one reading of it must not drain the node.
WARNING = {"SwThermalSlowdown", "HwSlowdown"}


def with_links(down: list[int]) -> list[int]:
    return [pynvml.NVML_NVLINK_VERSION_INVALID if link in down else pynvml.NVML_NVLINK_VERSION_4_0
            for link in range(LINKS)]


@pytest.mark.parametrize("down", [[0], [17], [3, 4], list(range(18))])
def test_an_inactive_nvlink_fails(node: dict[str, Path], down: list[int]) -> None:
    status, record = health(node, gpus(node["tmp"], gpu1={"nvlink": with_links(down)}))
    links = {r["device"]: r for r in rows(record, "NVLinks")}
    assert links["GPU 0"]["verdict"] == "pass"
    assert links["GPU 1"]["verdict"] == "fail" and status == 1
    assert links["GPU 1"]["details"]["inactive"] == down
    assert f"{len(down)} of 18 NVLinks inactive" in links["GPU 1"]["reason"]


def test_every_named_clock_event_reason_is_judged_by_its_name() -> None:
    assert set(REASON_BITS) >= FAILING | WARNING, sorted(REASON_BITS)


@pytest.mark.parametrize("name", sorted(REASON_BITS))
def test_a_clock_event_reason_alone_or_beside_idle(node: dict[str, Path], name: str) -> None:
    idle = REASON_BITS["GpuIdle"]
    for reasons in (REASON_BITS[name], REASON_BITS[name] | idle):
        readings = [{"sm": 0, "mem": 0, "reasons": reasons}]
        status, record = health(node, gpus(node["tmp"], gpu0={"readings": readings}))
        [clocks] = [r for r in rows(record, "clocks") if r["device"] == "GPU 0"]
        expected = "fail" if name in FAILING else "warn" if name in WARNING else "pass"
        assert clocks["verdict"] == expected, (name, reasons, clocks["reason"])
        assert status == (1 if expected == "fail" else 0)


def test_all_the_failing_reasons_at_once_are_all_named(node: dict[str, Path]) -> None:
    reasons = functools.reduce(operator.or_, (REASON_BITS[n] for n in FAILING | {"HwSlowdown"}))
    _, record = health(node, gpus(node["tmp"], gpu0={"readings": [
        {"sm": 0, "mem": 0, "reasons": reasons}]}))
    [clocks] = [r for r in rows(record, "clocks") if r["device"] == "GPU 0"]
    for words in ("HW thermal slowdown", "HW power brake slowdown", "HW slowdown"):
        assert words in clocks["reason"]


def pcie(width: int, most: int, gen: int, max_gen: int) -> dict[str, Any]:
    return {"pcie": {"max_width": most, "max_generation": max_gen, "gpu_max_generation": max_gen},
            "readings": [{"sm": 0, "mem": 0, "pcie_width": width, "pcie_gen": gen}]}


@pytest.mark.parametrize(("width", "most"), [(8, 16), (4, 16), (1, 16), (16, 16), (8, 8)])
def test_a_pcie_link_narrower_than_the_gpu_can_train_fails(
    node: dict[str, Path], width: int, most: int
) -> None:
    status, record = health(node, gpus(node["tmp"], gpu0=pcie(width, most, 5, 5)))
    [row] = [r for r in rows(record, "PCIe width") if r["device"] == "GPU 0"]
    assert row["verdict"] == ("fail" if width < most else "pass")
    assert status == (1 if width < most else 0)
    if width < most:
        assert f"trained at x{width}, the GPU and its slot can do x{most}" in row["reason"]


@pytest.mark.parametrize(("gen", "max_gen"), [(1, 5), (4, 5), (5, 5), (3, 4)])
def test_a_slower_pcie_generation_warns_only(node: dict[str, Path], gen: int, max_gen: int) -> None:
    """An idle GPU lowers its link speed: a warn that says so, not a drain."""
    status, record = health(node, gpus(node["tmp"], gpu0=pcie(16, 16, gen, max_gen)))
    [row] = [r for r in rows(record, "PCIe gen") if r["device"] == "GPU 0"]
    assert row["verdict"] == ("warn" if gen < max_gen else "pass") and status == 0


@pytest.mark.parametrize(("expected", "verdict"), [(3, "fail"), (8, "fail"), (2, "pass"),
                                                   (1, "pass")])
def test_the_gpu_count_is_judged_against_the_expected_count(
    node: dict[str, Path], expected: int, verdict: str
) -> None:
    """Two GPUs on the bus and in NVML; a third that never enumerated is missing from both."""
    status, record = health(node, gpus(node["tmp"]), "--expect-gpus", str(expected))
    [row] = rows(record, "GPU count")
    assert row["verdict"] == verdict and status == (1 if verdict == "fail" else 0)
    if verdict == "fail":
        assert f"2 of the {expected} GPUs this node should have are present" in row["reason"]


def links_with(replays: int, link: int = 3) -> dict[str, Any]:
    counts = zero_links()
    counts[str(link)]["replay"] = replays
    return {"nvlink_errors": counts}


def test_nvlink_error_counters_are_judged_as_what_was_added_since_the_last_run(
    node: dict[str, Path],
) -> None:
    """Counters count since the driver loaded; a check every few minutes judges the new ones.

    The warn line is 5 errors (Imbue, ``LIMITS["nvlink_errors"]``): 10 at the first run of a
    boot warn, the same 10 at the next run are old news, 8 more warn again, and a count that
    went down (a GPU reset zeroed the counters) is all new.
    """
    expected = [(10, "warn", "since the driver loaded", 10), (10, "pass", "since the last run", 0),
                (12, "pass", "since the last run", 2), (20, "warn", "since the last run", 8),
                (3, "pass", "since the last run", 3)]
    for replays, verdict, span, added in expected:
        _, record = health(node, gpus(node["tmp"], gpu0=links_with(replays)))
        [row] = [r for r in rows(record, "NVLink errors") if r["device"] == "GPU 0"]
        assert (row["verdict"], row["details"]["since"], row["value"]) == (verdict, span, added)
        assert row["reason"].endswith(f"({span})")


def nvlink5_counts(**per_link: dict[str, int]) -> dict[str, Any]:
    """NVLink5 facts keyed by pynvml's field names, every counter present (zero unless given)."""
    links = {}
    for link in range(LINKS):
        given = per_link.get(f"link{link}", {})
        links[str(link)] = {f"NVML_FI_DEV_NVLINK_COUNT_{name}": given.get(name, 0)
                            for name in nvlink5.COUNTERS}
    return {"nvlink5": links}


def test_nvlink5_counters_are_read_through_nvidias_fields_and_judged_per_run(
    node: dict[str, Path],
) -> None:
    runs = [
        ({}, "pass", "since the driver loaded"),
        ({"link5": {"SYMBOL_ERRORS": 900}}, "pass", "since the last run"),  # FEC corrects these
        ({"link5": {"SYMBOL_ERRORS": 900, "EFFECTIVE_ERRORS": 2}}, "warn", "since the last run"),
        ({"link5": {"SYMBOL_ERRORS": 900, "EFFECTIVE_ERRORS": 2}}, "pass", "since the last run"),
        ({"link5": {"SYMBOL_ERRORS": 900, "EFFECTIVE_ERRORS": 2,
                    "LINK_RECOVERY_FAILED_EVENTS": 1}}, "fail", "since the last run"),
    ]
    for per_link, verdict, span in runs:
        status, record = health(node, gpus(node["tmp"], gpu0=nvlink5_counts(**per_link)))
        [row] = rows(record, "NVLink5 errors")  # GPU 1 (no NVLink5 fields, as an H100) has none
        assert (row["device"], row["verdict"], row["details"]["since"]) == ("GPU 0", verdict, span)
        assert status == (1 if verdict == "fail" else 0)
    assert "link 5: 1 link recovery failed events" in row["reason"]


def test_every_nvlink5_counter_read_is_a_pynvml_field() -> None:
    assert set(nvlink5.COUNTERS) == {*nvlink5.FAILING, *nvlink5.WARNING, *nvlink5.KEPT}
    for name in nvlink5.COUNTERS:
        assert isinstance(getattr(pynvml, f"NVML_FI_DEV_NVLINK_COUNT_{name}"), int)


def test_the_expected_count_can_come_from_the_nodes_acceptance_record(
    node: dict[str, Path],
) -> None:
    """The real H200 record's shape (/work/shared/reference/gpu-h200/accept.json): devices."""
    record = node["tmp"] / "accept.json"
    devices = [{"label": f"GPU {i}", "name": "NVIDIA H100 80GB HBM3", "nvml_index": i}
               for i in range(4)]
    record.write_text(json.dumps({"schema": 1, "devices": devices}))
    status, found = health(node, gpus(node["tmp"]), "--expect-gpus-from", str(record))
    [row] = rows(found, "GPU count")
    assert status == 1 and row["verdict"] == "fail" and row["limit"] == 4


@pytest.mark.parametrize(
    ("text", "line"),
    [("{not json", "not JSON"), ('{"devices": 3}', "no devices list"),
     ('{"devices": [{"label": "CPU", "nvml_index": null}]}', "the record counts no GPU")],
)
def test_a_record_that_cannot_give_a_count_is_one_line(
    tmp_path: Path, text: str, line: str
) -> None:
    record = tmp_path / "accept.json"
    record.write_text(text)
    done = test_health._cli("--state", str(tmp_path / "s.json"), "--expect-gpus-from", str(record))
    assert done.returncode == 2 and done.stdout == "" and len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("workloads health: error: --expect-gpus-from ")
    assert f"accept.json: {line}; give" in done.stderr


@pytest.mark.parametrize("links", [2, 12, 18])
def test_pcie_cards_without_an_nvlink_bridge_are_not_drained_for_inactive_nvlinks(
    node: dict[str, Path], links: int,
) -> None:
    """A PCIe card (A100/H100 PCIe, no bridge fitted) answers NVML_FEATURE_DISABLED for every
    link it has, exactly as `nvidia-smi nvlink -s` prints ``<inactive>``: when no GPU of the node
    has an active NVLink, the node has no NVLink fabric to lose -- a warn, not a drain. One GPU
    with every link down beside GPUs whose links are up still fails
    (test_an_inactive_nvlink_fails)."""
    down = [pynvml.NVML_NVLINK_VERSION_INVALID] * links
    status, record = health(node, gpus(node["tmp"], gpu0={"nvlink": down}, gpu1={"nvlink": down}))
    found = {r["device"]: r for r in rows(record, "NVLinks")}
    assert {r["verdict"] for r in found.values()} == {"warn"}, found
    assert all("no NVLink active" in r["reason"] for r in found.values())
    assert status == 0
