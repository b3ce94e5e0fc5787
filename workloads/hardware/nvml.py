"""NVML readings for the battery: each GPU's link, clocks, errors, NVLinks, and samples under load.

The NVML module is a parameter (``pynvml`` from nvidia-ml-py in production; tests pass
recorded readings with the same API, ``tests/host/fake_nvml.py``), as in
``tfhost.monitor``. A query a GPU does not support reads as None, never an error:
a T4 has no NVLink and an old driver no remapped-row counters, and neither is a finding.

Every enum and bit NVML returns or takes is named as nvidia-ml-py names it (``nvml.h``'s
names), never written as a number: an NVLink version is ``NVML_NVLINK_VERSION_4_0``, an
enum whose value (6) is not the generation (4); a clock-event reason is
``nvmlClocksEventReasonHwSlowdown``. Units are ``nvml.h``'s: milliwatts for power, MHz
for clocks, degrees C, percent for utilisation.

Why sample during the battery rather than read once: a GPU lowers its PCIe link
generation and its clocks when idle, so "Gen1 at 210 MHz" read before the run means
nothing; the figures that count are those seen while the checks load the GPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pynvml

# NVML's clock-event (throttle) reason bits (nvml.h, nvmlClocksEventReason*), in words.
REASON_NAMES = {
    pynvml.nvmlClocksEventReasonGpuIdle: "GPU idle",
    pynvml.nvmlClocksEventReasonApplicationsClocksSetting: "application clocks setting",
    pynvml.nvmlClocksEventReasonSwPowerCap: "software power cap",
    pynvml.nvmlClocksEventReasonHwSlowdown: "hardware slowdown",
    pynvml.nvmlClocksEventReasonSyncBoost: "sync boost",
    pynvml.nvmlClocksEventReasonSwThermalSlowdown: "software thermal slowdown",
    pynvml.nvmlClocksEventReasonHwThermalSlowdown: "hardware thermal slowdown",
    pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown: "hardware power brake",
    pynvml.nvmlClocksEventReasonDisplayClockSetting: "display clock setting",
}
LOADED_PERCENT = 50  # a sample counts as "under load" at this GPU utilisation or above


def _nvlink_versions() -> dict[int, tuple[int, int]]:
    """``nvmlNvlinkVersion_t`` values to (major, minor), read off nvidia-ml-py's names.

    ``nvmlDeviceGetNvLinkVersion`` returns this enum (``NVML_NVLINK_VERSION_3_1`` is 5
    on an A100, ``NVML_NVLINK_VERSION_4_0`` is 6 on an H100), not the generation. The
    table is built from the constants' names, so a version NVIDIA adds is decoded by
    the nvidia-ml-py that names it; ``NVML_NVLINK_VERSION_INVALID`` decodes to nothing.
    """
    versions = {}
    for name in dir(pynvml):
        match = re.fullmatch(r"NVML_NVLINK_VERSION_(\d+)_(\d+)", name)
        if match:
            versions[int(getattr(pynvml, name))] = (int(match[1]), int(match[2]))
    return versions


NVLINK_VERSIONS = _nvlink_versions()


def nvlink_version(value: int | None) -> tuple[int, int] | None:
    """(major, minor) of an ``nvmlNvlinkVersion_t`` value; None for INVALID or unknown."""
    return None if value is None else NVLINK_VERSIONS.get(int(value))


def nvlink_version_text(value: int | None) -> str:
    """``"4.0"`` for ``NVML_NVLINK_VERSION_4_0``; the raw value, marked, when NVML's is new."""
    decoded = nvlink_version(value)
    return f"{decoded[0]}.{decoded[1]}" if decoded else f"unknown (nvmlNvlinkVersion_t {value})"


@dataclass(frozen=True)
class GpuFacts:
    """What a GPU reports about itself once (static for the battery's length)."""

    index: int
    name: str
    uuid: str | None
    pci_device_id: int | None  # e.g. 0x2330
    pcie_max_generation: int | None  # what this GPU in this slot can train to
    pcie_gpu_max_generation: int | None  # what the GPU itself can do
    pcie_max_width: int | None
    max_sm_clock_mhz: int | None
    max_memory_clock_mhz: int | None
    power_limit_w: float | None
    ecc_uncorrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None
    ecc_corrected_volatile: int | None
    remapped_rows: tuple[int, int, bool, bool] | None  # corrected, uncorrected, pending, failed
    retired_pages_pending: bool | None
    nvlink_active: int | None  # links up; None when the GPU has no NVLink
    nvlink_versions: tuple[int, ...] = ()  # each active link's nvmlNvlinkVersion_t value
    pci_vendor_id: int | None = None  # 0x10de for NVIDIA: the low half of pciDeviceId
    nvlink_links: int | None = None  # links NVML answers a state for: the device's own count


@dataclass(frozen=True)
class Sample:
    """One reading of a GPU while the battery runs."""

    time_s: float
    utilization_percent: int | None
    sm_clock_mhz: int | None
    memory_clock_mhz: int | None
    reasons: int | None
    power_w: float | None
    temperature_c: int | None
    pcie_generation: int | None
    pcie_width: int | None


@dataclass
class GpuWatch:
    """Facts and samples of one GPU: what the NVML rules judge."""

    facts: GpuFacts
    samples: list[Sample] = field(default_factory=list)

    def loaded(self) -> list[Sample]:
        return [
            s
            for s in self.samples
            if s.utilization_percent is not None and s.utilization_percent >= LOADED_PERCENT
        ]


def open_nvml(nvml: Any = None) -> Any | None:
    """``pynvml`` initialised, or None without a driver (or without nvidia-ml-py)."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    return nvml


def read_or_none(nvml: Any, func_name: str, *args: Any) -> Any:
    """One NVML query; unsupported, missing or failing reads give None.

    NotSupported, NoPermission, GpuIsLost and a symbol an older driver lacks all read as
    "not answered": each caller decides what a missing answer means (fail closed or info).
    """
    func: Callable[..., Any] | None = getattr(nvml, func_name, None)
    if func is None:
        return None
    try:
        return func(*args)
    except Exception:
        return None


_read = read_or_none


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def read_facts(nvml: Any, index: int) -> GpuFacts:
    """The static facts of GPU ``index`` (NVML numbering)."""
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = _read(nvml, "nvmlDeviceGetPciInfo", handle)
    # nvmlPciInfo_t.pciDeviceId: "the combined 16-bit device id and 16-bit vendor id",
    # the device ID in the high half.
    device_id = int(pci.pciDeviceId) >> 16 if pci is not None else None
    vendor_id = int(pci.pciDeviceId) & 0xFFFF if pci is not None else None
    uncorrected = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    corrected = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    volatile = pynvml.NVML_VOLATILE_ECC
    aggregate = pynvml.NVML_AGGREGATE_ECC
    remapped = _read(nvml, "nvmlDeviceGetRemappedRows", handle)
    # nvmlEnableState_t: NVML_FEATURE_ENABLED when a retirement waits for a reset.
    pending = _read(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", handle)
    power_mw = _read(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    active, versions, answered = _nvlinks(nvml, handle)
    return GpuFacts(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_maybe_text(_read(nvml, "nvmlDeviceGetUUID", handle)),
        pci_device_id=device_id,
        pcie_max_generation=_read(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle),
        pcie_gpu_max_generation=_read(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        pcie_max_width=_read(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle),
        max_sm_clock_mhz=_read(nvml, "nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_SM),
        max_memory_clock_mhz=_read(
            nvml, "nvmlDeviceGetMaxClockInfo", handle, pynvml.NVML_CLOCK_MEM
        ),
        power_limit_w=None if power_mw is None else power_mw / 1000,
        ecc_uncorrected_volatile=_read(
            nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, volatile
        ),
        ecc_uncorrected_aggregate=_read(
            nvml, "nvmlDeviceGetTotalEccErrors", handle, uncorrected, aggregate
        ),
        ecc_corrected_volatile=_read(
            nvml, "nvmlDeviceGetTotalEccErrors", handle, corrected, volatile
        ),
        remapped_rows=None
        if remapped is None
        else (int(remapped[0]), int(remapped[1]), bool(remapped[2]), bool(remapped[3])),
        retired_pages_pending=None if pending is None else pending == pynvml.NVML_FEATURE_ENABLED,
        nvlink_active=active,
        nvlink_versions=versions,
        pci_vendor_id=vendor_id,
        nvlink_links=answered if active is not None else None,
    )


def _maybe_text(value: Any) -> str | None:
    return None if value is None else _text(value)


def _nvlinks(nvml: Any, handle: Any) -> tuple[int | None, tuple[int, ...], int]:
    """Active NVLinks, their ``nvmlNvlinkVersion_t``, and how many links NVML answers for.

    (None, (), 0) when the GPU has no NVLink at all.

    ``nvmlDeviceGetNvLinkState`` answers ``NVML_FEATURE_ENABLED`` for a link that is up;
    a link index the GPU does not have answers an error, read as None and skipped.
    """
    active = 0
    answered = 0
    versions = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        state = _read(nvml, "nvmlDeviceGetNvLinkState", handle, link)
        if state is None:
            continue
        answered += 1
        if state == pynvml.NVML_FEATURE_ENABLED:
            active += 1
            version = _read(nvml, "nvmlDeviceGetNvLinkVersion", handle, link)
            if version is not None:
                versions.append(int(version))
    return (active if answered else None), tuple(versions), answered


def read_sample(nvml: Any, handle: Any, start: float, clock: Callable[[], float]) -> Sample:
    """One reading of the figures that change under load."""
    util = _read(nvml, "nvmlDeviceGetUtilizationRates", handle)
    reasons = _read(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:  # drivers before 535 name it "throttle reasons"
        reasons = _read(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    power_mw = _read(nvml, "nvmlDeviceGetPowerUsage", handle)
    return Sample(
        time_s=round(clock() - start, 3),
        utilization_percent=None if util is None else int(util.gpu),
        sm_clock_mhz=_read(nvml, "nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_SM),
        memory_clock_mhz=_read(nvml, "nvmlDeviceGetClockInfo", handle, pynvml.NVML_CLOCK_MEM),
        reasons=reasons,
        power_w=None if power_mw is None else round(power_mw / 1000, 1),
        temperature_c=_read(nvml, "nvmlDeviceGetTemperature", handle, pynvml.NVML_TEMPERATURE_GPU),
        pcie_generation=_read(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", handle),
        pcie_width=_read(nvml, "nvmlDeviceGetCurrPcieLinkWidth", handle),
    )


class Watcher:
    """Reads every GPU's facts now, then samples them in a thread while the battery runs."""

    def __init__(
        self,
        nvml: Any,
        interval_s: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.nvml = nvml
        self.interval_s = interval_s
        self.clock = clock
        count = int(nvml.nvmlDeviceGetCount())
        self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self.gpus = [GpuWatch(read_facts(nvml, i)) for i in range(count)]
        from workloads.hardware.topology import read_topology  # it decodes with this module

        self.topology = read_topology(nvml, count)  # what joins each pair, read once
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="accept-nvml", daemon=True)
        self._start = clock()

    def now(self) -> float:
        """The time on the samples' own clock (``Sample.time_s``), to mark a window with."""
        return round(self.clock() - self._start, 3)

    def memory_info(self, index: int) -> tuple[int, int] | None:
        """(free, total) bytes of the GPU at NVML ``index`` (nvmlDeviceGetMemoryInfo), or None."""
        try:
            info = self.nvml.nvmlDeviceGetMemoryInfo(self.handles[index])
            return int(info.free), int(info.total)
        except Exception:  # no reading: the caller falls back to the backend's
            return None

    def sample_once(self) -> None:
        for gpu, handle in zip(self.gpus, self.handles, strict=True):
            gpu.samples.append(read_sample(self.nvml, handle, self._start, self.clock))

    def _loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(Exception):  # a reading must never stop the battery
                self.sample_once()
            self._stop.wait(self.interval_s)

    @contextlib.contextmanager
    def running(self) -> Iterator[Watcher]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join()
            self.sample_once()  # the state right after the last check


def other_processes(nvml: Any, own_pid: int) -> int | None:
    """Compute processes on any GPU besides this one; None when NVML cannot tell.

    In a container NVML reports host PIDs, so this process is not found by its own
    PID: then one process per GPU is taken to be this one.
    """
    count = _read(nvml, "nvmlDeviceGetCount")
    if count is None:
        return None
    per_gpu = []
    for index in range(int(count)):
        handle = _read(nvml, "nvmlDeviceGetHandleByIndex", index)
        procs = _read(nvml, "nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is None:
            return None
        per_gpu.append([int(p.pid) for p in procs])
    sees_own = any(own_pid in pids for pids in per_gpu)
    others = 0
    for pids in per_gpu:
        if sees_own:
            others += sum(1 for pid in pids if pid != own_pid)
        else:
            others += max(0, len(pids) - 1)
    return others


def sram_threshold_exceeded(nvml: Any, handle: Any) -> bool | None:
    """NVML's SRAM error threshold flag (what ``nvidia-smi`` shows as sram_threshold_exceeded).

    NVIDIA's XID 48 workflow: for an SRAM (not framebuffer) uncorrectable error, "check SRAM
    Error Threshold flag; if set RUN_FIELDDIAG". Read with ``nvmlDeviceGetSramEccErrorStatus``
    into pynvml's ``c_nvmlEccSramErrorStatus_v1_t`` (version ``nvmlEccSramErrorStatus_v1``);
    None where the GPU or the driver does not answer it.
    """
    status_type = getattr(pynvml, "c_nvmlEccSramErrorStatus_v1_t", None)
    if status_type is None:
        return None
    status = status_type()
    status.version = pynvml.nvmlEccSramErrorStatus_v1
    try:
        nvml.nvmlDeviceGetSramEccErrorStatus(handle, ctypes.byref(status))
    except Exception:  # NotSupported (before Hopper), FunctionNotFound (older drivers)
        return None
    return bool(status.bThresholdExceeded)
