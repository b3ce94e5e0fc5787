"""A GPU's UUID in another spelling is the same GPU; a placeholder is no UUID at all.

NVML writes a UUID as "GPU-" and 16 bytes in lowercase hex (`nvmlDeviceGetUUID`; a MIG
instance's "MIG-"); a record edited by hand, or merged from a tool that prints
nvidia-smi's fields, may carry one in upper case or padded, or "N/A" / "[N/A]" where the
UUID was not read. The first is still the GPU's identity (two records holding it are one
machine); the second identifies nothing, and eight hosts all holding "N/A" are not eight
hosts sharing a GPU. The family: each spelling of a real UUID, each placeholder.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from workloads.fleet.load import host_from_record
from workloads.fleet.synthetic import synthetic_record
from workloads.fleet.verdict import judge

SPELLINGS: list[Callable[[str], str]] = [str.upper, lambda u: f" {u} ", lambda u: u.swapcase(),
                                         lambda u: u[:4] + u[4:].upper(), lambda u: f"{u}\n"]
PLACEHOLDERS = ["N/A", "[N/A]", "n/a", "Unknown", "[Unknown Error]", "0", "GPU-", "None"]


def _fleet(edit: Callable[[str, dict[str, Any]], None]) -> dict[str, tuple[str, list[str]]]:
    records = {f"h{i}": synthetic_record(f"h{i}", 4, random.Random(i), noise=0.01)
               for i in range(4)}
    for name, rec in records.items():
        edit(name, rec)
    fleet = judge([host_from_record(name, rec) for name, rec in records.items()])
    return {v.host: (v.verdict, v.reasons) for v in fleet.verdicts}


@pytest.mark.parametrize("spell", SPELLINGS)
def test_a_uuid_spelled_otherwise_in_another_record_is_still_shared(
        spell: Callable[[str], str]) -> None:
    def edit(name: str, rec: dict[str, Any]) -> None:
        if name == "h1":  # h1's GPU 2 is h0's GPU 2, written by hand in another case
            rec["devices"][2]["uuid"] = spell(synthetic_record("h0", 4, random.Random(0))
                                              ["devices"][2]["uuid"])
    verdicts = _fleet(edit)
    for host, other in (("h0", "h1"), ("h1", "h0")):
        verdict, reasons = verdicts[host]
        assert verdict == "fail" and any(f"GPU 2 shares its UUID with {other}" in r
                                         for r in reasons), verdicts[host]
    assert verdicts["h2"][0] == verdicts["h3"][0] == "pass"


@pytest.mark.parametrize("placeholder", PLACEHOLDERS)
def test_a_placeholder_uuid_on_every_host_is_no_shared_gpu(placeholder: str) -> None:
    def edit(name: str, rec: dict[str, Any]) -> None:
        for device in rec["devices"]:
            device["uuid"] = placeholder
    verdicts = _fleet(edit)
    assert {verdict for verdict, _ in verdicts.values()} == {"pass"}, verdicts
