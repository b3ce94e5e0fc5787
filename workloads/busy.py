"""Was the machine busy while we measured? Keeps a low peak from becoming an MFU denominator.

A matmul peak measured while other work shared the CPU (or the GPU) is too low,
and every MFU divided by it is too high (a run at 43 % printed 78 % after the
first peak had been measured during a test suite at load 2.9). So each
measurement is bracketed by two readings:

* the share of the machine's CPU time that OTHER processes used between them
  (``/proc/stat`` minus this process's own CPU time): immediate and exact, unlike
  the load average, which lags by a minute and counts this process too;
* the number of other processes with a context on a GPU (NVML), before and after.

Above :data:`BUSY_SHARE`, or with another GPU process present, the measurement is
*provisional*: used, said so in the record, and measured again next time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BUSY_SHARE = 0.10  # others' share of all CPU time above which a measurement is provisional


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU seconds: all CPUs busy, all CPUs in total, and this process's own."""

    busy_s: float
    total_s: float
    own_s: float


@dataclass(frozen=True)
class LoadReading:
    """What was seen around one measurement."""

    others_cpu_share: float | None
    load_average: float | None
    gpu_other_processes: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_times(stat: Path = Path("/proc/stat")) -> CpuTimes | None:
    """The ``cpu`` line of /proc/stat in seconds, with this process's CPU time; None off Linux."""
    try:
        first = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not first or first[0] != "cpu":
        return None
    ticks = [int(v) for v in first[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal [guest guest_nice: already in user]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    total = sum(ticks[:8])
    own = os.times()
    return CpuTimes((total - idle) / hz, total / hz, own.user + own.system)


def others_share(before: CpuTimes | None, after: CpuTimes | None) -> float | None:
    """Share of all CPU time between two readings used by processes other than this one."""
    if before is None or after is None:
        return None
    total = after.total_s - before.total_s
    if total <= 0:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return min(1.0, max(0.0, others / total))


def busy_reason(reading: LoadReading, limit: float = BUSY_SHARE) -> str | None:
    """Why a measurement taken under ``reading`` is provisional, or None when the host was idle."""
    reasons = []
    if reading.others_cpu_share is not None and reading.others_cpu_share > limit:
        reasons.append(f"other processes used {reading.others_cpu_share:.0%} of the CPU time")
    if reading.gpu_other_processes:
        reasons.append(f"{reading.gpu_other_processes} other process(es) on the GPUs")
    return "; ".join(reasons) or None


class Probe:
    """Brackets a measurement: ``token = probe.start()``, measure, ``probe.stop(token)``."""

    def __init__(
        self,
        read_cpu: Callable[[], CpuTimes | None] = cpu_times,
        gpu_others: Callable[[], int | None] | None = None,
    ) -> None:
        self.read_cpu = read_cpu
        self.gpu_others = gpu_others if gpu_others is not None else gpu_other_processes

    def start(self) -> tuple[CpuTimes | None, int | None]:
        return self.read_cpu(), self.gpu_others()

    def stop(self, token: tuple[CpuTimes | None, int | None]) -> LoadReading:
        before, gpu_before = token
        after = self.read_cpu()
        gpu_after = self.gpu_others()
        gpu = (
            None
            if gpu_before is None and gpu_after is None
            else max(gpu_before or 0, gpu_after or 0)
        )
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        return LoadReading(others_share(before, after), load, gpu)


def gpu_other_processes() -> int | None:
    """Other processes holding a GPU context now (NVML); None without a driver."""
    from workloads.hardware.nvml import open_nvml, other_processes

    nvml = open_nvml()
    if nvml is None:
        return None
    try:
        return other_processes(nvml, os.getpid())
    finally:
        nvml.nvmlShutdown()
