"""An NVML module that replays readings: what the GPU monitor is tested with without a GPU.

It has the names and call signatures of ``pynvml`` (nvidia-ml-py) that the
monitor uses (a test checks they exist there), returns the readings of
``data/nvml_readings.json`` in NVML's units and types, and raises
``NVMLError_NotSupported`` for a reading recorded as null. Each query on each
GPU steps through the readings on its own, so the order of queries in a sample
does not matter; after the last reading the last one repeats.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

READINGS = Path(__file__).parent / "data" / "nvml_readings.json"

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # pynvml's name
    pass


class FakeNvml:
    """Module-like object: ``GpuSampler(FakeNvml())``."""

    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVMLError = NVMLError

    def __init__(self, path: Path = READINGS) -> None:
        self.gpus = json.loads(path.read_text())["gpus"]
        self.calls: Counter[tuple[str, int]] = Counter()
        self.initialised = 0

    def _reading(self, query: str, handle: int) -> dict[str, Any]:
        readings = self.gpus[handle]["readings"]
        n = self.calls[(query, handle)]
        self.calls[(query, handle)] += 1
        return readings[min(n, len(readings) - 1)]

    def _value(self, query: str, handle: int, key: str) -> Any:
        value = self._reading(query, handle)[key]
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def nvmlInit(self) -> None:
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> bytes:
        return self.gpus[handle]["name"].encode()  # older pynvml returns bytes

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        reading = self._reading("utilization", handle)
        return SimpleNamespace(gpu=reading["sm"], memory=reading["mem"])

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        total = self.gpus[handle]["memory_total"]
        used = self._value("memory", handle, "used")
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return int(self._value("power", handle, "power_mw"))

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return int(self._value("temperature", handle, "temp"))

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:
        key = {NVML_CLOCK_SM: "sm_clock", NVML_CLOCK_MEM: "mem_clock"}[clock]
        return int(self._value(f"clock{clock}", handle, key))


API = [name for name in vars(FakeNvml) if name.startswith(("nvml", "NVML"))]
