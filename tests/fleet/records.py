"""Acceptance records for fleet tests: the shape `workloads accept` writes, with made-up figures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# (check, item, unit, healthy figure, datasheet limit)
PER_GPU = (("matmul", "bfloat16", "TFLOP/s", 700.0, 989.0),
           ("membw", "copy", "GB/s", 2900.0, 3350.0),
           ("transfer", "host to device", "GB/s", 52.0, 64.0))


def finding(check: str, device: str, item: str, value: float | None, *, unit: str = "",
            limit: float | None = None, verdict: str = "pass", reason: str = "",
            limit_source: str | None = None) -> dict[str, Any]:
    return {"check": check, "device": device, "item": item, "verdict": verdict, "reason": reason,
            "value": value, "unit": unit, "limit": limit, "limit_source": limit_source,
            "details": {}, "fraction": value / limit if value is not None and limit else None}


MATMUL_FLOAT32 = ("matmul", "float32", "TFLOP/s", 51.0, 67.0)


def record(host: str, *, gpus: int = 8, scale: float = 1.0,
           gpu_scale: dict[int, float] | None = None, model: str = "NVIDIA H100 80GB HBM3",
           verdicts: dict[str, str] | None = None, allreduce: float = 370.0,
           float32: bool = False, links: dict[int, int] | int | None = None,
           link_verdict: str = "pass") -> dict[str, Any]:
    """A host's record: per-GPU figures at `scale` of healthy values, and an all-reduce.

    `float32` adds a second matmul dtype; `links` adds NVML's NVLink row per GPU (links
    active of the board's 18: one count for every GPU, or a count per GPU index).
    """
    gpu_scale = gpu_scale or {}
    verdicts = verdicts or {}
    checks = (MATMUL_FLOAT32, *PER_GPU) if float32 else PER_GPU
    findings = [finding(check, f"GPU {index}", item, healthy * scale * gpu_scale.get(index, 1.0),
                        unit=unit, limit=limit, verdict=verdicts.get(f"{check}/{index}", "pass"))
                for index in range(gpus) for check, item, unit, healthy, limit in checks]
    if links is not None:
        active = links if isinstance(links, dict) else dict.fromkeys(range(gpus), links)
        findings += [finding("nvml", f"GPU {index}", "NVLink", active.get(index, 18), unit="links",
                             limit=18, verdict=link_verdict if active.get(index, 18) == 18
                             else "fail" if link_verdict != "info" else "info",
                             reason=f"{active.get(index, 18)} of 18 links active")
                     for index in range(gpus)]
    findings.append(finding("allreduce", f"GPUs 0-{gpus - 1}", "1 GiB busbw", allreduce * scale,
                            unit="GB/s", limit=450.0, limit_source="NVLink 4",
                            verdict=verdicts.get("allreduce", "pass")))
    return {"schema": 1, "workload": "accept", "status": "done", "mode": "full",
            "env": {"host": host, "cpu": "AMD EPYC 9654", "cpu_count": 192,
                    "gpus": [model] * gpus},
            "findings": findings, "verdict": "pass"}


def error_stub(host: str, reason: str) -> dict[str, Any]:
    return {"host": host, "status": "error", "error": reason}


def write(directory: Path, records: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rec in records:
        name = rec.get("host") or rec["env"]["host"]
        (directory / f"{name}.json").write_text(json.dumps(rec))
    return directory
