"""The new fleet shapes on the suite's plain record helper (`tests.fleet.records`), judged as
`workloads report --fleet` judges a run directory: the same verdicts as on the battery-shaped
generated records of test_shapes.py, from records built independently of that generator."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.fleet.records import record, write
from workloads.fleet.load import host_from_record
from workloads.fleet.synthetic import gpu_uuid
from workloads.fleet.verdict import judge


def _with_uuids(rec: dict[str, Any], host: str, names: list[str] | None = None
                ) -> dict[str, Any]:
    gpus = len(rec["env"]["gpus"])
    names = names or rec["env"]["gpus"]
    rec["devices"] = [{"label": f"GPU {i}", "name": names[i],
                       "uuid": gpu_uuid(host, i)}  # NVML's form: GPU- and hex
                      for i in range(gpus)]
    rec["env"]["gpus"] = list(names)
    return rec


def _report(run: Path, *args: str) -> tuple[int, dict[str, Any]]:
    result = subprocess.run([sys.executable, "-m", "workloads", "report", "--fleet", str(run),
                             *args], capture_output=True, text=True, timeout=120, check=False)
    report = run / "report" / "fleet.json"
    verdicts = ({h["host"]: h for h in json.loads(report.read_text())["hosts"]}
                if report.exists() else {})
    return result.returncode, verdicts


def test_an_unreadable_record_fails_its_host_and_the_others_are_judged(tmp_path: Path) -> None:
    run = write(tmp_path / "run", [record(f"h{i}", gpus=2) for i in range(3)])
    (run / "h3.json").write_text('{"schema": 1, "findings": [')
    code, verdicts = _report(run)
    assert code == 0
    assert verdicts["h3"]["verdict"] == "fail"
    assert {verdicts[f"h{i}"]["verdict"] for i in range(3)} == {"pass"}


def test_the_inventory_fails_a_host_without_a_record(tmp_path: Path) -> None:
    run = write(tmp_path / "run", [record(f"h{i}", gpus=2) for i in range(3)])
    (tmp_path / "hosts").write_text("h0\nh1\nh2\nh3\n")
    code, verdicts = _report(run, "--inventory", str(tmp_path / "hosts"))
    assert code == 0 and verdicts["h3"]["verdict"] == "fail"


def test_two_hosts_one_40_percent_slow_fails_the_slow_one() -> None:
    fleet = judge([host_from_record("a", record("a")),
                   host_from_record("b", record("b", scale=0.6))])
    verdicts = {v.host: v for v in fleet.verdicts}
    assert verdicts["b"].verdict == "fail" and verdicts["a"].verdict == "pass"
    assert len(verdicts["b"].reasons) == 1, verdicts["b"].reasons


def test_a_gpu_of_another_model_fails_and_its_host_stays_in_the_group() -> None:
    names = ["NVIDIA H100 80GB HBM3"] * 5 + ["NVIDIA H100 SXM5 96GB"] + \
        ["NVIDIA H100 80GB HBM3"] * 2
    hosts = [host_from_record(f"h{i}", _with_uuids(record(f"h{i}"), f"h{i}"))
             for i in range(3)]
    hosts.append(host_from_record("odd", _with_uuids(record("odd"), "odd", names)))
    verdict = judge(hosts).verdicts[-1]
    assert verdict.host == "odd" and verdict.group == "NVIDIA H100 80GB HBM3"
    assert verdict.reasons == ["fail: GPU 5 is H100 SXM5 96GB where this host's other GPUs are "
                               "H100 80GB HBM3"]


def test_a_uuid_in_two_records_fails_both_and_no_other() -> None:
    hosts = [host_from_record(f"h{i}", _with_uuids(record(f"h{i}"), f"h{i}")) for i in range(3)]
    hosts.append(host_from_record("alias", _with_uuids(record("alias"), "h1")))
    verdicts = {v.host: v for v in judge(hosts).verdicts}
    assert verdicts["alias"].verdict == verdicts["h1"].verdict == "fail"
    assert verdicts["h0"].verdict == verdicts["h2"].verdict == "pass"
    assert verdicts["alias"].reasons == [
        "fail: GPUs 0–7 share their UUIDs with h1 (one GPU in two records: a machine measured "
        "under two names, or a record copied over another's; measure each machine under its "
        "own name)"]


def test_one_gpu_straddling_the_fail_line_is_one_line() -> None:
    """GPU 3 at 72 % on one check and 68 % on the others: a warn and fails, one cause."""
    hosts = [host_from_record(f"h{i}", record(f"h{i}", float32=True)) for i in range(4)]
    slow = record("slow", float32=True, gpu_scale={3: 0.68})
    for row in slow["findings"]:
        if row["device"] == "GPU 3" and row["check"] == "transfer":
            row["value"] = 52.0 * 0.78
    verdict = judge([*hosts, host_from_record("slow", slow)]).verdicts[-1]
    assert verdict.reasons == ["fail: GPU 3: 22–32 % below its group on all 4 checks"], \
        verdict.reasons


def test_one_slow_gpu_below_its_datasheet_and_its_group_is_one_line() -> None:
    """The battery failed two of GPU 3's rows and warned one against the datasheet, and the
    group finds all three 32 % below: one cause, one fail line, every row in its evidence."""
    hosts = [host_from_record(f"h{i}", record(f"h{i}")) for i in range(4)]
    slow = record("slow", gpu_scale={3: 0.68},
                  verdicts={"matmul/3": "fail", "membw/3": "fail", "transfer/3": "warn"})
    verdict = judge([*hosts, host_from_record("slow", slow)]).verdicts[-1]
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith(
        "fail: GPU 3: 3 figures short (2 fail, 1 warn) against the datasheet"), verdict.reasons
    assert "32 % below its group on all 3 checks" in verdict.reasons[0]
    assert len(verdict.evidence[0]) == 6  # three datasheet rows, three outliers
