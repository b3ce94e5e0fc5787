"""An NVML module that replays readings: what the GPU monitor and ``workloads accept`` test with.

It has the names and call signatures of ``pynvml`` (nvidia-ml-py) that the
monitor and the acceptance battery use (a test checks they exist there), returns
the readings of ``data/nvml_readings.json`` (or another file of that shape) in
NVML's units and types, and raises ``NVMLError_NotSupported`` for a reading
recorded as null or not recorded at all. Each query on each GPU steps through
the readings on its own, so the order of queries in a sample does not matter;
after the last reading the last one repeats. Per-GPU facts that do not change
(PCI device ID, link maxima, ECC and remapped-row counters, NVLink versions,
compute processes) are keys of the GPU itself.

Its constants are nvidia-ml-py's own (``pynvml.NVML_CLOCK_SM``, ``NVML_FEATURE_ENABLED``,
…), never numbers typed here, so the fake and the code read one definition. An NVLink is
recorded as its ``nvmlNvlinkVersion_t`` value (``pynvml.NVML_NVLINK_VERSION_4_0``), or
``NVML_NVLINK_VERSION_INVALID`` for a link that is down; ``tests/host/nvml_boards.py``
builds whole boards that way.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

READINGS = Path(__file__).parent / "data" / "nvml_readings.json"

NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
NVML_MEMORY_ERROR_TYPE_CORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
NVML_AGGREGATE_ECC = pynvml.NVML_AGGREGATE_ECC
NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):  # pynvml's name
    pass


class FakeNvml:
    """Module-like object: ``GpuSampler(FakeNvml())``."""

    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVMLError = NVMLError

    def __init__(self, path: Path | dict[str, Any] = READINGS) -> None:
        data = path if isinstance(path, dict) else json.loads(path.read_text())
        self.gpus = data["gpus"]
        self.pairs = data.get("pairs", {})  # "a,b" (a < b) -> P2P statuses and PCIe level
        self.calls: Counter[tuple[str, int]] = Counter()
        self.initialised = 0

    def _reading(self, query: str, handle: int) -> dict[str, Any]:
        readings = self.gpus[handle]["readings"]
        n = self.calls[(query, handle)]
        self.calls[(query, handle)] += 1
        return readings[min(n, len(readings) - 1)]

    def _value(self, query: str, handle: int, key: str) -> Any:
        value = self._reading(query, handle).get(key)
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return value

    def _fact(self, handle: int, *path: str | int) -> Any:
        """A per-GPU fact (``gpus[i][path...]``); absent or null reads as NotSupported."""
        value: Any = self.gpus[handle]
        for key in path:
            try:
                value = value[key]
            except (KeyError, IndexError, TypeError):
                raise NVMLError_NotSupported("Not Supported") from None
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


    # --- what `workloads accept` reads besides the monitor's columns ----------------------

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return str(self._fact(handle, "uuid"))

    def nvmlDeviceGetSramEccErrorStatus(self, handle: int, status: Any) -> int:
        """pynvml's call: fills the ``c_nvmlEccSramErrorStatus_v1_t`` passed by reference."""
        status._obj.bThresholdExceeded = int(bool(self._fact(handle, "sram_threshold_exceeded")))
        return int(pynvml.NVML_SUCCESS)

    def nvmlDeviceGetSerial(self, handle: int) -> str:
        return str(self._fact(handle, "serial"))

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        device_id = int(str(self._fact(handle, "pci_device_id")), 16)
        bus = self.gpus[handle].get("bus") or f"0000:{handle:02x}:00.0"
        return SimpleNamespace(pciDeviceId=(device_id << 16) | 0x10DE, busId=bus)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: int) -> int:
        return int(self._fact(handle, "pcie", "max_generation"))

    def nvmlDeviceGetGpuMaxPcieLinkGeneration(self, handle: int) -> int:
        return int(self._fact(handle, "pcie", "gpu_max_generation"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: int) -> int:
        return int(self._fact(handle, "pcie", "max_width"))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: int) -> int:
        return int(self._value("pcie_gen", handle, "pcie_gen"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: int) -> int:
        return int(self._value("pcie_width", handle, "pcie_width"))

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        key = {NVML_CLOCK_SM: "sm", NVML_CLOCK_MEM: "mem"}[clock]
        return int(self._fact(handle, "max_clocks", key))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return int(self._value("reasons", handle, "reasons"))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return int(self._fact(handle, "power_limit_mw"))

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter: int) -> int:
        kind = "uncorrected" if error_type == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
        span = "volatile" if counter == NVML_VOLATILE_ECC else "aggregate"
        return int(self._fact(handle, "ecc", f"{kind}_{span}"))

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        corrected, uncorrected, pending, failed = self._fact(handle, "remapped_rows")
        return int(corrected), int(uncorrected), int(pending), int(failed)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, handle: int) -> int:
        pending = self._fact(handle, "retired_pages_pending")
        return pynvml.NVML_FEATURE_ENABLED if pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        up = self._fact(handle, "nvlink", link) != pynvml.NVML_NVLINK_VERSION_INVALID
        return pynvml.NVML_FEATURE_ENABLED if up else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkVersion(self, handle: int, link: int) -> int:
        version = int(self._fact(handle, "nvlink", link))
        if version == pynvml.NVML_NVLINK_VERSION_INVALID:
            raise NVMLError_NotSupported("link down")
        return version

    # --- the topology graph (workloads/hardware/topology.py) --------------------------------
    # Per GPU: ``nvlink_remote[link]`` = {"type": NVML_NVLINK_DEVICE_TYPE_*, "bus": "..."}
    # (absent: NVML cannot name the far end) and ``virtualization_mode``; per pair, under
    # the top-level ``pairs["a,b"]``: "nvlink" and "read" (nvmlGpuP2PStatus_t) and
    # "ancestor" (nvmlGpuTopologyLevel_t). Absent: NotSupported, as on a driver without them.

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: int, link: int) -> int:
        self.nvmlDeviceGetNvLinkVersion(handle, link)  # a link that is down has no far end
        return int(self._fact(handle, "nvlink_remote", link, "type"))

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> Any:
        self.nvmlDeviceGetNvLinkVersion(handle, link)
        return SimpleNamespace(busId=str(self._fact(handle, "nvlink_remote", link, "bus")))

    def nvmlDeviceGetVirtualizationMode(self, handle: int) -> int:
        return int(self._fact(handle, "virtualization_mode"))

    def _pair(self, first: int, second: int, key: str) -> int:
        a, b = sorted((first, second))
        value = self.pairs.get(f"{a},{b}", {}).get(key)
        if value is None:
            raise NVMLError_NotSupported("Not Supported")
        return int(value)

    def nvmlDeviceGetP2PStatus(self, first: int, second: int, index: int) -> int:
        key = {pynvml.NVML_P2P_CAPS_INDEX_NVLINK: "nvlink",
               pynvml.NVML_P2P_CAPS_INDEX_READ: "read"}.get(index, "other")
        return self._pair(first, second, key)

    def nvmlDeviceGetTopologyCommonAncestor(self, first: int, second: int) -> int:
        return self._pair(first, second, "ancestor")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=None)
                for pid in self.gpus[handle].get("processes", [])]


API = [name for name in vars(FakeNvml) if name.startswith(("nvml", "NVML"))]


# --- the link error counters of `workloads accept`'s errors check and `workloads health` -----
# NVML's own counter names, taken from pynvml (nvmlNvLinkErrorCounter_t), never typed here.
_pynvml = pynvml

NVLINK_COUNTERS = {
    _pynvml.NVML_NVLINK_ERROR_DL_REPLAY: "replay",
    _pynvml.NVML_NVLINK_ERROR_DL_RECOVERY: "recovery",
    _pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT: "crc_flit",
    _pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA: "crc_data",
}


class FakeNvmlErrors(FakeNvml):
    """``FakeNvml`` with the NVLink error and PCIe replay counters.

    Per GPU: ``nvlink_errors`` maps a link number (a string, JSON's keys) to counts keyed
    by the names in :data:`NVLINK_COUNTERS` (absent: NotSupported), and ``pcie_replays``.
    """

    NVML_NVLINK_ERROR_DL_REPLAY = _pynvml.NVML_NVLINK_ERROR_DL_REPLAY
    NVML_NVLINK_ERROR_DL_RECOVERY = _pynvml.NVML_NVLINK_ERROR_DL_RECOVERY
    NVML_NVLINK_ERROR_DL_CRC_FLIT = _pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT
    NVML_NVLINK_ERROR_DL_CRC_DATA = _pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA

    def nvmlDeviceGetNvLinkErrorCounter(self, handle: int, link: int, counter: int) -> int:
        return int(self._fact(handle, "nvlink_errors", str(link), NVLINK_COUNTERS[counter]))

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        return int(self._fact(handle, "pcie_replays"))

    def nvmlDeviceGetFieldValues(self, handle: int, field_ids: list[Any]) -> list[Any]:
        """pynvml's call with (field id, scope id) pairs; ``nvlink5`` facts keyed by the
        field's pynvml name (``NVML_FI_DEV_NVLINK_COUNT_SYMBOL_ERRORS``) per link."""
        names = {int(getattr(_pynvml, n)): n for n in dir(_pynvml) if n.startswith("NVML_FI_")}
        values = []
        for field_id, scope in field_ids:
            try:
                count = int(self._fact(handle, "nvlink5", str(scope), names[field_id]))
                ret = _pynvml.NVML_SUCCESS
            except NVMLError_NotSupported:
                count, ret = 0, _pynvml.NVML_ERROR_NOT_SUPPORTED
            values.append(SimpleNamespace(fieldId=field_id, scopeId=scope, nvmlReturn=ret,
                                          valueType=_pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                                          value=SimpleNamespace(ullVal=count)))
        return values


ERRORS_API = [name for name in vars(FakeNvmlErrors) if name.startswith(("nvml", "NVML"))]
