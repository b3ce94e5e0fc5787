"""A host split evenly between two GPU models joins the fleet's model's group, and the GPUs
named as the odd ones are those unlike the fleet.

Read alone, four H100s and four A100s have no model most of them are; taking the first by
name would put the host in a group of its own (compared with nothing) and, where the
fleet's model sorts second, name the four GPUs the siblings share as the wrong ones. The
family: every ordered pair of real NVML names (as `nvmlDeviceGetName` gives them), each
even split of 2, 4, 6 and 8 GPUs, the fleet of either model, judged in fleet.json, .md
and .html.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from workloads.fleet.command import render_fleet
from workloads.fleet.synthetic import synthetic_record

NAMES = ["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "NVIDIA H200", "NVIDIA L40S"]


def _mixed(host: str, gpus: int, first: str, second: str) -> dict[str, Any]:
    rec = synthetic_record(host, gpus, random.Random(7), noise=0.01, model=first)
    for device in rec["devices"][gpus // 2:]:
        device["name"] = second
        device.pop("model", None)
        device.pop("pci_device_id", None)
    rec["env"]["gpus"] = [d["name"] for d in rec["devices"]]
    return rec


@pytest.mark.parametrize(("fleet_model", "other", "gpus", "odd_first"), [
    (a, b, n, odd_first) for a, b in itertools.permutations(NAMES, 2)
    for n in (2, 4, 6, 8) for odd_first in (False, True)][::3])
def test_an_even_split_joins_the_fleets_group_naming_the_other_gpus(
        tmp_path: Path, fleet_model: str, other: str, gpus: int, odd_first: bool) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for i in range(3):
        rec = synthetic_record(f"ok{i}", gpus, random.Random(i), noise=0.01, model=fleet_model)
        (run / f"ok{i}.json").write_text(json.dumps(rec))
    first, second = (other, fleet_model) if odd_first else (fleet_model, other)
    (run / "mixed.json").write_text(json.dumps(_mixed("mixed", gpus, first, second)))
    render_fleet(run, tmp_path / "out")
    hosts = {h["host"]: h for h in json.loads((tmp_path / "out" / "fleet.json").read_text())
             ["hosts"]}
    half = gpus // 2
    odd = range(0, half) if odd_first else range(half, gpus)
    named = f"GPU {odd[0]}" if half == 1 else f"GPUs {odd[0]}–{odd[-1]}"
    short = other.removeprefix("NVIDIA ")
    line = f"{named} {'is' if half == 1 else 'are'} {short} where this host's other GPUs " \
           f"are {fleet_model.removeprefix('NVIDIA ')}"
    assert hosts["mixed"]["group"] == fleet_model, hosts["mixed"]
    assert hosts["mixed"]["verdict"] == "fail"
    assert any(line in r for r in hosts["mixed"]["reasons"]), hosts["mixed"]["reasons"]
    assert {hosts[f"ok{i}"]["verdict"] for i in range(3)} == {"pass"}
    for output in ("fleet.md", "fleet.html"):
        text = (tmp_path / "out" / output).read_text()
        assert line.replace("'", "&#x27;") in text or line in text, output
