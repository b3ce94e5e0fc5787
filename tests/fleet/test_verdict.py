"""Host verdicts: fail against the hardware or without a battery, warn against the group."""

from __future__ import annotations

from tests.fleet.records import error_stub, finding, record
from workloads.fleet.load import host_from_record
from workloads.fleet.verdict import judge


def _judge(records: list[dict]) -> dict[str, tuple[str, list[str]]]:
    fleet = judge([host_from_record(r.get("host") or r["env"]["host"], r) for r in records])
    return {v.host: (v.verdict, v.reasons) for v in fleet.verdicts}


def test_a_host_whose_battery_did_not_run_fails_with_its_reason_and_the_rest_are_judged() -> None:
    verdicts = _judge([record(f"h{i}") for i in range(3)]
                      + [error_stub("h9", "image tfhost/workloads:ngc is missing")])
    assert verdicts["h9"] == (
        "fail", ["the battery did not run: image tfhost/workloads:ngc is missing"])
    assert {verdicts[f"h{i}"][0] for i in range(3)} == {"pass"}


def test_a_check_failed_against_the_datasheet_fails_the_host_even_in_a_small_group() -> None:
    verdicts = _judge([record("h0", verdicts={"membw/3": "fail"}), record("h1")])
    verdict, reasons = verdicts["h0"]
    assert verdict == "fail"
    assert any("GPU 3 membw copy" in r for r in reasons)
    assert verdicts["h1"][0] == "pass"


def test_an_outlier_warns_with_the_check_the_device_and_the_gap() -> None:
    verdicts = _judge([record(f"h{i}", allreduce=300.0 if i == 4 else 370.0) for i in range(6)])
    verdict, reasons = verdicts["h4"]
    assert verdict == "warn"
    assert reasons == ["warn: outlier in its group: allreduce 1 GiB busbw 300 GB/s is 19% below "
                       "its group's 370 (the median of the other hosts)"]
    assert all(verdicts[f"h{i}"] == ("pass", []) for i in range(6) if i != 4)


def test_an_outlier_30_percent_below_its_group_fails() -> None:
    verdicts = _judge([record(f"h{i}", allreduce=220.0 if i == 4 else 370.0) for i in range(6)])
    assert verdicts["h4"] == ("fail", ["fail: outlier in its group: allreduce 1 GiB busbw 220 "
                                       "GB/s is 41% below its group's 370 (the median of the "
                                       "other hosts)"])


def test_datasheet_verdicts_of_one_gpu_are_one_line() -> None:
    verdicts = _judge([record("h0", verdicts={"membw/3": "fail", "matmul/3": "fail"})])
    verdict, reasons = verdicts["h0"]
    assert verdict == "fail"
    assert reasons == ["fail: GPU 3: 2 figures fail against the datasheet (matmul bfloat16, "
                       "membw copy)"]


def test_findings_without_a_figure_count() -> None:
    rec = record("h0")
    rec["findings"].append(finding("nvml", "GPU 2", "throttle reasons", None, verdict="warn",
                                   reason="HW slowdown (power brake) active"))
    verdict, reasons = _judge([rec])["h0"]
    assert verdict == "warn"
    assert reasons == ["warn: GPU 2 nvml throttle reasons: HW slowdown (power brake) active"]
