"""Synthetic acceptance records of the battery's full shape, for sizing the fleet step.

Each host gets what `workloads accept` writes on an 8-GPU machine: per GPU the four matmul
dtypes, the memory copy, both transfer directions and the NVML rows; per host eleven
all-reduce sizes, the training run, DCGM and the busy-host row; `env` as collect_env writes
it. Figures scatter a few per cent around healthy values; a chosen share of hosts has one slow
GPU, so the outlier path is exercised at scale too.
"""

from __future__ import annotations

import random
from typing import Any

MATMUL = (("float32", 51.0, 67.0), ("tf32", 370.0, 494.5), ("bfloat16", 700.0, 989.4),
          ("float16", 700.0, 989.4))
SIZES = ("1 MiB", "2 MiB", "4 MiB", "8 MiB", "16 MiB", "32 MiB", "64 MiB", "128 MiB",
         "256 MiB", "512 MiB", "1 GiB")
NVML_ROWS = ("PCIe link", "SM clock", "throttle reasons", "power", "temperature", "ECC",
             "remapped rows")


def _row(check: str, device: str, item: str, value: float | None, unit: str,
         limit: float | None, reason: str = "") -> dict[str, Any]:
    return {"check": check, "device": device, "item": item, "verdict": "pass" if limit else "info",
            "reason": reason or f"{item}: within its limit", "value": value, "unit": unit,
            "limit": limit, "limit_source": "NVIDIA H100 SXM5 datasheet" if limit else None,
            "details": {}, "fraction": value / limit if value is not None and limit else None}


def synthetic_record(host: str, gpus: int, rng: random.Random, slow_gpu: int | None = None
                     ) -> dict[str, Any]:
    """One host's record; `slow_gpu` runs at 60 % of its siblings."""
    def jitter(value: float, gpu: int | None = None) -> float:
        return value * rng.uniform(0.97, 1.03) * (0.6 if gpu is not None and gpu == slow_gpu else 1)

    rows = []
    for gpu in range(gpus):
        device = f"GPU {gpu}"
        rows += [_row("matmul", device, dtype, jitter(v, gpu), "TFLOP/s", limit)
                 for dtype, v, limit in MATMUL]
        rows.append(_row("membw", device, "copy", jitter(2900.0, gpu), "GB/s", 3350.0))
        rows += [_row("transfer", device, direction, jitter(52.0, gpu), "GB/s", 63.0)
                 for direction in ("host to device", "device to host")]
        rows += [_row("nvml", device, name, None, "", None, f"{name}: normal")
                 for name in NVML_ROWS]
    every = f"GPUs 0-{gpus - 1}"
    rows += [_row("allreduce", every, f"{size} busbw", jitter(370.0 * (i + 1) / len(SIZES)),
                  "GB/s", 450.0) for i, size in enumerate(SIZES)]
    rows.append(_row("training", every, "resnet50v2 mixed", jitter(20000.0), "images/s", None))
    rows.append(_row("dcgm", "host", "diag level 1", None, "", None, "PASS"))
    rows.append(_row("host", "host", "other processes", jitter(0.01), "share", None))
    return {"schema": 1, "workload": "accept", "started_at": "2026-11-25T00:00:00Z",
            "status": "done", "mode": "full", "verdict": "pass", "exit_code": 0,
            "devices": [{"label": f"GPU {g}", "name": "NVIDIA H100 80GB HBM3",
                         "model": "H100 SXM5 80GB", "pci_device_id": "0x2330"}
                        for g in range(gpus)],
            "env": {"host": host, "os": "Linux-6.8.0-x86_64-with-glibc2.39",
                    "cpu": "AMD EPYC 9654 96-Core Processor", "cpu_count": 192,
                    "memory_bytes": 2 * 1024**4, "gpus": ["NVIDIA H100 80GB HBM3"] * gpus,
                    "driver": "570.124.06", "keras_backend": "tensorflow"},
            "findings": rows}
