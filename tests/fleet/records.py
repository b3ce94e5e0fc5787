"""Acceptance records for fleet tests: the shape `workloads accept --json` writes, made up."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CHECKS = (("matmul bfloat16", "TFLOP/s", 990.0), ("memory bandwidth", "GB/s", 3350.0),
          ("host-device transfer", "GB/s", 64.0))


def record(host: str, *, gpus: int = 8, scale: float = 1.0,
           gpu_scale: dict[int, float] | None = None, model: str = "NVIDIA H100 80GB HBM3",
           verdicts: dict[str, str] | None = None,
           allreduce: float = 370.0) -> dict[str, Any]:
    """A host's record: per-GPU figures at `scale` of healthy values, and an all-reduce."""
    gpu_scale = gpu_scale or {}
    verdicts = verdicts or {}
    checks: list[dict[str, Any]] = []
    for index in range(gpus):
        for name, unit, limit in CHECKS:
            value = 0.8 * limit * scale * gpu_scale.get(index, 1.0)
            checks.append({"check": name, "device": f"GPU {index}", "value": value, "unit": unit,
                           "limit": limit, "fraction": value / limit,
                           "warn_at": 0.7 * limit, "fail_at": 0.5 * limit,
                           "verdict": verdicts.get(f"{name}/{index}", "pass"), "reason": ""})
    checks.append({"check": "all-reduce busbw", "device": None, "value": allreduce * scale,
                   "unit": "GB/s", "limit": 450.0, "verdict": verdicts.get("all-reduce", "pass"),
                   "reason": ""})
    return {"workload": "accept", "status": "ok", "host": host,
            "hardware": {"group": f"{gpus}× {model}"},
            "env": {"hostname": host, "gpus": [{"name": model}] * gpus}, "checks": checks}


def error_stub(host: str, reason: str) -> dict[str, Any]:
    return {"host": host, "status": "error", "error": reason}


def write(directory: Path, records: list[dict[str, Any]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for rec in records:
        (directory / f"{rec['host']}.json").write_text(json.dumps(rec))
    return directory
