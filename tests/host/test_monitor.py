"""The GPU monitor: sampling logic on replayed NVML readings, the no-GPU path for real.

On the lent GPU machine the ``gpu``-marked test samples the real GPUs through
``pynvml``; everywhere else the same sampler runs on ``FakeNvml``, whose API is
checked against ``pynvml``'s so the stand-in cannot drift from the real thing.
"""

from __future__ import annotations

import csv
import io
import sys
import time
from pathlib import Path

import pytest

from tests.host import tfhost_cli
from tests.host.fake_nvml import API, FakeNvml


def _nvml_works() -> bool:
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        return True
    except Exception:
        return False


def test_fake_nvml_has_pynvml_names() -> None:
    import pynvml

    missing = [name for name in API if not hasattr(pynvml, name)]
    assert missing == []
    assert FakeNvml.NVML_CLOCK_SM == pynvml.NVML_CLOCK_SM
    assert FakeNvml.NVML_CLOCK_MEM == pynvml.NVML_CLOCK_MEM
    assert FakeNvml.NVML_TEMPERATURE_GPU == pynvml.NVML_TEMPERATURE_GPU


def test_sampler_converts_readings_to_dmon_units() -> None:
    from tfhost.monitor import GpuSampler

    nvml = FakeNvml()
    sampler = GpuSampler(nvml)
    first, second = sampler.sample(), sampler.sample()
    assert first[0] == {
        "gpu": 0, "name": "NVIDIA H100 80GB HBM3", "sm_percent": 0, "memory_percent": 0,
        "memory_used_mib": 508, "memory_total_mib": 81559, "power_w": 71.2,
        "temperature_c": 31, "sm_clock_mhz": 345, "memory_clock_mhz": 2619,
    }
    assert second[0]["sm_percent"] == 97 and second[0]["memory_used_mib"] == 12288
    assert second[0]["power_w"] == 512.9
    assert second[1]["gpu"] == 1 and second[1]["name"] == "NVIDIA A100-PCIE-40GB"
    assert second[1]["power_w"] is None  # NotSupported: an empty cell, not a crash
    assert second[1]["temperature_c"] == 44
    sampler.close()
    assert nvml.initialised == 0


def test_sampler_watches_only_the_chosen_gpus() -> None:
    from tfhost.monitor import GpuSampler

    rows = GpuSampler(FakeNvml(), indices=[1]).sample()
    assert [row["gpu"] for row in rows] == [1]
    nvml = FakeNvml()
    with pytest.raises(ValueError, match=r"GPU index \[5\] not present"):
        GpuSampler(nvml, indices=[0, 5])
    assert nvml.initialised == 0  # shut down again after the failure


def test_monitor_writes_a_row_per_gpu_per_interval(tmp_path: Path) -> None:
    from tfhost.monitor import COLUMNS, GpuMonitor, GpuSampler, read_samples

    csv_path = tmp_path / "run.gpu.csv"
    monitor = GpuMonitor(GpuSampler(FakeNvml()), csv_path, interval_s=0.05).start()
    deadline = time.monotonic() + 10
    while monitor.samples < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    monitor.stop()
    with open(csv_path, newline="") as fh:
        assert next(csv.reader(fh)) == COLUMNS
    rows = read_samples(csv_path)
    assert len(rows) == 2 * monitor.samples and monitor.samples >= 4
    gpu0 = [r for r in rows if r["gpu"] == 0]
    times = [r["time_s"] for r in gpu0]
    assert times == sorted(times) and times[0] == 0.0
    assert [r["sm_percent"] for r in gpu0[:3]] == [0, 97, 99]
    assert all(r["power_w"] is None for r in rows if r["gpu"] == 1)
    assert gpu0[0]["name"] == "NVIDIA H100 80GB HBM3"


def test_the_first_row_is_time_zero_however_slow_the_start(tmp_path: Path) -> None:
    """time_s counts from the first sample: a slow file open must not shift row one."""
    from tfhost.monitor import GpuMonitor, GpuSampler, read_samples

    ticks = iter(range(10_000))

    def slow_clock() -> float:  # every call is 2 ms later than the one before
        return next(ticks) * 0.002

    csv_path = tmp_path / "run.gpu.csv"
    monitor = GpuMonitor(GpuSampler(FakeNvml()), csv_path, interval_s=0.05,
                         clock=slow_clock).start()
    deadline = time.monotonic() + 10
    while monitor.samples < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    monitor.stop()
    times = sorted({row["time_s"] for row in read_samples(csv_path)})
    assert times[0] == 0.0 and len(times) >= 2


def test_monitoring_without_a_gpu_says_so_once_and_the_run_goes_on(tmp_path: Path) -> None:
    from tfhost.monitor import monitoring

    if _nvml_works():
        pytest.skip("this machine has an NVIDIA driver")
    log = io.StringIO()
    ran = []
    with monitoring(tmp_path / "x.gpu.csv", log=log) as monitor:
        ran.append(True)
    assert ran == [True] and monitor is None
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpu monitor: no GPU to watch (")
    assert not (tmp_path / "x.gpu.csv").exists()


def test_monitor_command_runs_the_command_and_returns_its_code(tmp_path: Path) -> None:
    if _nvml_works():
        pytest.skip("this machine has an NVIDIA driver")
    result = tfhost_cli.run_process(["monitor", "--csv", str(tmp_path / "m.gpu.csv"), "--",
                                     sys.executable, "-c", "print('ran'); raise SystemExit(3)"])
    assert result.returncode == 3
    assert result.stdout.strip() == "ran"
    assert "gpu monitor: no GPU to watch" in result.stderr


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "0,a"], "'0,a' is not a list of GPU indices"),
        (["--gpus", "1,1"], "must be distinct indices"),
        (["--interval", "0"], "--interval: must be > 0"),
        (["--", "/nonexistent/cmd"], "command '/nonexistent/cmd' not found"),
    ],
)
def test_monitor_command_bad_input(tmp_path: Path, argv: list[str], message: str) -> None:
    result = tfhost_cli.run_process(["monitor", "--csv", str(tmp_path / "m.csv"), *argv])
    assert result.returncode == 2
    assert message in result.stderr.strip().splitlines()[-1]


def test_monitor_csv_lands_beside_the_record(tmp_path: Path) -> None:
    from tfhost.commands.run import monitor_csv
    from tfhost.monitor import csv_beside

    assert csv_beside(Path("out/r50.json")) == Path("out/r50.gpu.csv")
    args = ["cifar10", "--output", "/results/sub/r50.json"]
    assert monitor_csv(args, tmp_path) == tmp_path / "sub" / "r50.gpu.csv"
    assert monitor_csv(["check"], tmp_path).name.startswith("gpu-monitor-")


@pytest.mark.gpu
def test_real_gpus_are_sampled(tmp_path: Path) -> None:
    if not _nvml_works():
        pytest.skip("no NVIDIA driver on this machine")
    import pynvml
    from tfhost.monitor import GpuSampler

    sampler = GpuSampler(pynvml)
    rows = sampler.sample()
    sampler.close()
    assert rows and all(0 <= r["sm_percent"] <= 100 for r in rows)
    assert all(r["memory_total_mib"] > 1000 and r["sm_clock_mhz"] > 0 for r in rows)
