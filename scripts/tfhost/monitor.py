"""Sample every GPU through NVML once a second into a CSV: what ``nvidia-smi dmon`` showed.

Seed 001 watched its runs with ``nvidia-smi dmon``; this records the same
columns (SM and memory utilisation, memory used, power, temperature, SM and
memory clocks) with a time axis, beside the run's record, so a report can draw
utilisation over time. The NVML module is a parameter: production passes
``pynvml`` (from ``nvidia-ml-py``), tests pass recorded readings. Without a GPU
or driver the monitor says so once and the run goes on unobserved.
"""

from __future__ import annotations

import csv
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from workloads import safefs
from workloads.bounded import BadInput, parse_number, read_csv_table
from workloads.errors import clip

COLUMNS = [
    "time_s",  # seconds since the monitor started
    "timestamp",  # UTC wall clock, to line up with log lines
    "gpu",  # NVML index (the host's numbering, as in nvidia-smi)
    "name",
    "sm_percent",  # dmon "sm": share of time a kernel was running
    "memory_percent",  # dmon "mem": share of time device memory was read or written
    "memory_used_mib",  # dmon "fb"
    "memory_total_mib",
    "power_w",  # dmon "pwr"
    "temperature_c",  # dmon "gtemp"
    "sm_clock_mhz",  # dmon "pclk"
    "memory_clock_mhz",  # dmon "mclk"
]
MIB = 1 << 20
GPU_INDEX_MAX = 1024  # NVML enumerates a few dozen devices at most


class GpuSampler:
    """Reads one row per GPU from an NVML module (``pynvml`` or a stand-in with its API)."""

    def __init__(self, nvml: Any, indices: Sequence[int] | None = None) -> None:
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            count = int(nvml.nvmlDeviceGetCount())
            chosen = list(range(count)) if indices is None else list(indices)
            missing = [i for i in chosen if not 0 <= i < count]
            if missing:
                raise ValueError(f"GPU index {missing} not present (NVML sees {count})")
            self.handles = {i: nvml.nvmlDeviceGetHandleByIndex(i) for i in chosen}
            self.names = {i: _text(nvml.nvmlDeviceGetName(h)) for i, h in self.handles.items()}
        except BaseException:
            nvml.nvmlShutdown()
            raise

    def sample(self) -> list[dict[str, Any]]:
        """One reading per GPU; a figure the GPU does not report is left empty."""
        rows = []
        for index, handle in self.handles.items():
            nvml = self.nvml
            util = self._read(nvml.nvmlDeviceGetUtilizationRates, handle)
            memory = self._read(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = self._read(nvml.nvmlDeviceGetPowerUsage, handle)
            rows.append(
                {
                    "gpu": index,
                    "name": self.names[index],
                    "sm_percent": None if util is None else int(util.gpu),
                    "memory_percent": None if util is None else int(util.memory),
                    "memory_used_mib": None if memory is None else round(memory.used / MIB),
                    "memory_total_mib": None if memory is None else round(memory.total / MIB),
                    "power_w": None if power_mw is None else round(power_mw / 1000, 1),
                    "temperature_c": self._read(
                        nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
                    ),
                    "sm_clock_mhz": self._read(
                        nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM
                    ),
                    "memory_clock_mhz": self._read(
                        nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM
                    ),
                }
            )
        return rows

    def _read(self, func: Callable[..., Any], *args: Any) -> Any:
        """Call one NVML query; unsupported or failing queries give None, not a crash."""
        try:
            return func(*args)
        except self.nvml.NVMLError:
            return None

    def close(self) -> None:
        self.nvml.nvmlShutdown()


class GpuMonitor:
    """A background thread writing ``sampler.sample()`` rows to a CSV every ``interval_s``."""

    def __init__(self, sampler: GpuSampler, csv_path: Path, interval_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.sampler = sampler
        self.csv_path = Path(csv_path)
        self.interval_s = interval_s
        self.clock = clock
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-monitor", daemon=True)
        self._error: BaseException | None = None
        self._stream: TextIO | None = None

    def start(self) -> GpuMonitor:
        # Opened here, not in the thread: a link planted at the CSV's name is refused in one
        # line before the benchmark starts (safefs: checked directory, no link, ours alone).
        self._stream = safefs.open_for_writing(self.csv_path, newline="")
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the sample in progress; the CSV is complete when this returns."""
        self._stop.set()
        self._thread.join()
        self.sampler.close()
        if self._error is not None:
            print(f"gpu monitor: sampling stopped early ({self._error})", file=sys.stderr)

    def _loop(self) -> None:
        try:
            assert self._stream is not None  # opened by start()
            with self._stream as fh:
                writer = csv.DictWriter(fh, fieldnames=COLUMNS)
                writer.writeheader()
                # time_s counts from the first sample, so the first row is 0.0 however long
                # opening the file took (under load that was milliseconds, and row one said so).
                start: float | None = None
                next_tick = 0.0
                while True:
                    now = self.clock()
                    if start is None:
                        start = next_tick = now
                    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                    for row in self.sampler.sample():
                        writer.writerow({"time_s": round(now - start, 3), "timestamp": stamp,
                                         **row})
                    fh.flush()  # a reader (or a crash) sees every finished sample
                    self.samples += 1
                    next_tick += self.interval_s
                    if self._stop.wait(max(0.0, next_tick - self.clock())):
                        break
        except Exception as exc:  # a monitor must never take the benchmark down
            self._error = exc


def open_sampler(indices: Sequence[int] | None = None, nvml: Any = None,
                 log: TextIO | None = None) -> GpuSampler | None:
    """A sampler over the GPUs, or None after saying once why there is none."""
    log = log or sys.stderr
    try:
        if nvml is None:
            import pynvml

            nvml = pynvml
        return GpuSampler(nvml, indices)
    except ImportError:
        reason = "nvidia-ml-py is not installed"
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, bad index
        reason = " ".join(str(exc).split()) or type(exc).__name__
    print(f"gpu monitor: no GPU to watch ({reason}); the run goes on without GPU samples",
          file=log)
    return None


@contextmanager
def monitoring(csv_path: Path, indices: Sequence[int] | None = None, interval_s: float = 1.0,
               nvml: Any = None, log: TextIO | None = None) -> Iterator[GpuMonitor | None]:
    """Sample GPUs into ``csv_path`` for the duration of the ``with`` block (if any GPU)."""
    sampler = open_sampler(indices, nvml, log)
    if sampler is None:
        yield None
        return
    monitor = GpuMonitor(sampler, csv_path, interval_s).start()
    try:
        yield monitor
    finally:
        monitor.stop()


def csv_beside(record_path: Path) -> Path:
    """``run.json`` → ``run.gpu.csv``: the monitor's file sits beside the record."""
    record_path = Path(record_path)
    return record_path.with_name(record_path.stem + ".gpu.csv")


def read_samples(csv_path: Path) -> list[dict[str, Any]]:
    """Rows of a monitor CSV with numbers as floats (empty cells as None).

    Read through :func:`workloads.bounded.read_csv_table` (a regular file, no link
    followed; bytes, rows, columns and cells capped before a row is kept); a cell
    that is not a finite number, or a ``gpu`` that is not a small index, is
    :class:`workloads.bounded.BadInput` naming its row and column.
    """
    header, table = read_csv_table(Path(csv_path))
    rows = []
    for number, cells in enumerate(table, start=2):
        parsed: dict[str, Any] = {}
        for key, value in zip(header, cells, strict=True):
            if key in ("timestamp", "name"):
                parsed[key] = value
            elif value == "":
                parsed[key] = None
            else:
                try:
                    parsed[key] = parse_number(value)
                except BadInput as exc:
                    raise BadInput(f"row {number} column {clip(key, 30)} {exc}") from None
        gpu = parsed.get("gpu")
        if gpu is not None and not (gpu == int(gpu) and 0 <= gpu < GPU_INDEX_MAX):
            raise BadInput(f"row {number} has GPU index {gpu:g}, not 0 to {GPU_INDEX_MAX - 1}")
        rows.append(parsed)
    return rows


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
