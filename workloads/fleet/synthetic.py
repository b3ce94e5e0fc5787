"""Synthetic acceptance records of the battery's full shape, healthy or with one planted fault.

Each host gets what `workloads accept` writes on a GPU machine (the rows, items, devices and
units of `workloads/accept/checks.py` and a real H200 record): per GPU the four matmul dtypes,
the memory copy, both transfer directions and the NVML rows (NVLink: links active of the
board's 18); per host the all-reduce sizes and its best busbw, the training run on GPU 0,
DCGM and the busy-host row; `env` as collect_env writes it. Figures scatter within ±`noise`
around healthy H100 SXM values.

A `Defect` plants one fault, the kinds the fleet verdict exists to catch: a GPU fallen off
the bus, NVLinks down, one slow GPU or a whole slow host, a check or a dtype that left no
rows, an empty or unfinished record, a GPU of another model than its host's others, two
GPUs of one record with one UUID. Each GPU has a UUID of NVML's form ("GPU-" and a UUID),
derived from the host's name and the GPU's index, so no two hosts share one unless a
test makes them. `workloads bench fleet` sizes the fleet step with these and measures the
verdict's false-positive and miss rates; the generated-fleet tests draw from them.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

MATMUL = (("float32", 51.0, 67.0), ("tensorfloat32", 370.0, 494.5),
          ("bfloat16", 700.0, 989.4), ("float16", 700.0, 989.4))
ALLREDUCE_SIZES = ("1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB")
BOARD_LINKS = 18
CHECKS = ["matmul", "membw", "transfer", "allreduce", "training", "nvml", "dcgm"]
GPU_NAME = "NVIDIA H100 80GB HBM3"
OTHER_GPU_NAME = "NVIDIA H100 SXM5 96GB"  # the spare of another variant a host can be given
SOURCE = "H100 SXM5 80GB datasheet [h100-datasheet, 2023-09]"

DEFECTS = ("missing GPU", "NVLink down", "slow GPU", "slow host", "missing check",
           "missing dtype", "empty record", "partial record", "other-model GPU",
           "duplicate UUID", "split models")


@dataclass(frozen=True)
class Defect:
    """One planted fault: `kind` (one of DEFECTS) and where it strikes.

    `gpu`: the GPU that is missing, slow, has links down, is of another model, or takes the
    next GPU's UUID; `factor`: a slow GPU's (or slow host's) figures as a share of healthy
    ones; `links_down`: how many of its NVLinks are down; `check`: the
    check that left no rows; `dtype`: the matmul dtype that left no rows.
    """

    kind: str
    gpu: int = 0
    factor: float = 0.8
    links_down: int = 1
    check: str = "allreduce"
    dtype: str = "bfloat16"

    def describe(self) -> str:
        return {"missing GPU": f"GPU {self.gpu} missing", "NVLink down":
                f"{self.links_down} NVLink(s) down on GPU {self.gpu}", "slow GPU":
                f"GPU {self.gpu} at {self.factor:.0%}", "slow host": f"host at {self.factor:.0%}",
                "other-model GPU": f"GPU {self.gpu} is {OTHER_GPU_NAME}",
                "split models": f"half the GPUs (GPU {self.gpu}'s half) are {OTHER_GPU_NAME}",
                "duplicate UUID": f"GPU {self.gpu} has another GPU's UUID",
                "missing check": f"no {self.check} rows",
                "missing dtype": f"no matmul {self.dtype} rows"}.get(self.kind, self.kind)


def _row(check: str, device: str, item: str, value: float | None, unit: str,
         limit: float | None, verdict: str = "pass", reason: str = "") -> dict[str, Any]:
    return {"check": check, "device": device, "item": item, "verdict": verdict,
            "reason": reason or (f"{value / limit:.0%} of {limit:g} {unit} ({SOURCE})"
                                 if value is not None and limit else f"{item}: as expected"),
            "value": value, "unit": unit, "limit": limit,
            "limit_source": SOURCE if limit else None, "details": {},
            "fraction": value / limit if value is not None and limit else None}


def gpu_uuid(host: str, index: int) -> str:
    """A GPU's UUID in NVML's form, the same for the same host and index on every run."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{index}.{host}.gpu.invalid')}"


def synthetic_record(host: str, gpus: int, rng: random.Random, slow_gpu: int | None = None,
                     *, noise: float = 0.03, defect: Defect | None = None,
                     slow_factor: float = 0.6, model: str = GPU_NAME) -> dict[str, Any]:
    """One host's record of `model` GPUs; `slow_gpu` runs at `slow_factor` of its siblings;
    `defect` plants one fault (it replaces `slow_gpu`)."""
    kind = defect.kind if defect is not None else None
    if defect is not None and kind == "slow GPU":
        slow_gpu, slow_factor = defect.gpu, defect.factor
    whole = defect.factor if defect is not None and kind == "slow host" else 1.0
    visible = [g for g in range(gpus)
               if not (defect is not None and kind == "missing GPU" and g == defect.gpu)]

    def jitter(value: float, gpu: int | None = None) -> float:
        slow = slow_factor if gpu is not None and gpu == slow_gpu else 1.0
        return value * rng.uniform(1 - noise, 1 + noise) * slow * whole

    rows = [_row("dcgm", "host", "diag level 1", None, "", None, "pass", "PASS")]
    for index, gpu in enumerate(visible):  # NVML numbers the GPUs it sees from 0
        device = f"GPU {index}"
        rows += [_row("matmul", device, f"{dtype} 8192²", jitter(v, gpu), "TFLOP/s", limit)
                 for dtype, v, limit in MATMUL]
        rows.append(_row("membw", device, "copy 1024 MiB", jitter(2900.0, gpu), "GB/s", 3350.0))
        rows += [_row("transfer", device, f"{direction} 256 MiB", jitter(52.0, gpu), "GB/s", 63.0)
                 for direction in ("host→device", "device→host")]
        rows += [_row("nvml", device, name, None, "", None, "pass", f"{name}: normal")
                 for name in ("PCIe link", "SM clock", "throttling", "memory errors")]
        if len(visible) > 1:
            down = defect.links_down if defect is not None and defect.kind == "NVLink down" \
                and gpu == defect.gpu else 0
            active = BOARD_LINKS - down
            rows.append(_row("nvml", device, "NVLink", active, "links", BOARD_LINKS,
                             "pass" if not down else "fail", f"{active} of {BOARD_LINKS} links"))
    label = f"GPUs ×{len(visible)}"
    if len(visible) > 1:
        steps = len(ALLREDUCE_SIZES)
        busbw = [jitter(370.0 * (i + 1) / steps) for i in range(steps)]
        rows += [_row("allreduce", label, size, value, "GB/s", None, "info")
                 for size, value in zip(ALLREDUCE_SIZES, busbw, strict=True)]
        rows.append(_row("allreduce", label, f"best busbw ({ALLREDUCE_SIZES[-1]})", max(busbw),
                         "GB/s", 450.0))
    elif visible:
        rows.append(_row("allreduce", label, "sum", None, "", None, "skip",
                         "one device: nothing to reduce across"))
    if visible:
        rows.append(_row("training", "GPU 0", "resnet50v2 128 px, mixed_float16, batch 128, XLA",
                         jitter(180.0, visible[0]), "TFLOP/s", 989.4))
    rows.append(_row("host", "host", "other load", jitter(1.0), "%", None, "pass",
                     "other processes used 1% of the CPU time during the battery"))
    if defect is not None and defect.kind == "missing check":
        rows = [r for r in rows if r["check"] != defect.check]
    if defect is not None and defect.kind == "missing dtype":
        rows = [r for r in rows if not (r["check"] == "matmul"
                                        and r["item"].startswith(f"{defect.dtype} "))]
    known = {"model": "H100 SXM5 80GB", "pci_device_id": "0x2330"} if model == GPU_NAME else {}
    devices = [{"label": f"GPU {i}", "name": model, **known, "nvml_index": i,
                "uuid": gpu_uuid(host, g)} for i, g in enumerate(visible)]
    if defect is not None and kind == "other-model GPU" and defect.gpu < len(devices):
        devices[defect.gpu].update(name=OTHER_GPU_NAME, model="H100 SXM5 96GB",
                                   pci_device_id="0x2338")  # pci.ids: GH100 [H100 SXM5 96GB]
    if defect is not None and kind == "split models" and len(devices) > 1:
        half = len(devices) // 2  # an even split: GPU `gpu`'s half is the other model
        for entry in devices[:half] if defect.gpu < half else devices[half:2 * half]:
            entry.update(name=OTHER_GPU_NAME, model="H100 SXM5 96GB", pci_device_id="0x2338")
    if defect is not None and kind == "duplicate UUID" and len(devices) > 1:
        twin = (defect.gpu + 1) % len(devices)
        devices[defect.gpu]["uuid"] = devices[twin]["uuid"]
    record: dict[str, Any] = {
        "schema": 1, "workload": "accept", "started_at": "2026-11-25T00:00:00Z",
        "status": "done", "mode": "full", "checks_selected": list(CHECKS), "dcgm_level": 1,
        "backend": "tensorflow", "verdict": "pass", "exit_code": 0,
        "devices": devices,
        "env": {"host": host, "os": "Linux-6.8.0-x86_64-with-glibc2.39",
                "cpu": "AMD EPYC 9654 96-Core Processor", "cpu_count": 192,
                "memory_bytes": 2 * 1024**4, "gpus": [d["name"] for d in devices],
                "driver": "570.124.06", "keras_backend": "tensorflow"},
        "findings": rows}
    if defect is not None and defect.kind == "empty record":
        record["findings"] = []
    if defect is not None and defect.kind == "partial record":
        record["status"] = "running"
        record["findings"] = [r for r in rows if r["check"] in ("dcgm", "matmul")]
    return record
