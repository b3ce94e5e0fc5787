"""Records → figures and report.md: scaling curves, utilisation over time, CPU-vs-GPU bars.

The records are written with the project's own record functions, shaped like
what ``workloads cifar10`` writes on a 4-GPU host and on this CPU; the monitor
CSV comes from the real monitor driven by replayed NVML readings.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.host.fake_nvml import FakeNvml

GPU = "NVIDIA H100 80GB HBM3"
CPU = "AMD EPYC 7B13"


def _record(replicas: int, rate: float, kind: str, model: str = "resnet50v2") -> dict[str, Any]:
    from workloads.records import new_record

    device = GPU if kind == "GPU" else CPU
    return new_record(
        "cifar10", status="ok", model=model, backend="tensorflow", data="synthetic",
        devices=[device] * replicas, replicas=replicas, batch_size_per_replica=64,
        global_batch_size=64 * replicas, precision="fp32", xla=False,
        examples_per_sec=rate, step_time_s=64 * replicas / rate,
        epoch_times_s=[50000 / rate + 5, 50000 / rate, 50000 / rate * 1.02], accuracy=None,
        env={"cpu": CPU, "gpus": [GPU] * 4 if kind == "GPU" else []},
    )


def _write(directory: Path, name: str, record: dict[str, Any]) -> Path:
    from workloads.records import write_record

    return write_record(record, directory / name)


def _png_size(path: Path) -> tuple[int, int]:
    with Image.open(path) as image:
        assert image.format == "PNG"
        return image.size


@pytest.fixture
def gpu_results(tmp_path: Path) -> Path:
    """A results directory: 1/2/4-GPU runs, a CPU run and a monitor CSV of the 4-GPU run."""
    from tfhost.monitor import GpuMonitor, GpuSampler, csv_beside

    results = tmp_path / "results"
    for n, rate in ((1, 2400.0), (2, 4560.0), (4, 8640.0)):
        record = _write(results, f"r50-gpus-{n}.json", _record(n, rate, "GPU"))
    _write(results, "r50-cpu.json", _record(1, 31.5, "CPU"))
    monitor = GpuMonitor(GpuSampler(FakeNvml()), csv_beside(record), interval_s=0.02).start()
    while monitor.samples < 5:
        time.sleep(0.01)
    monitor.stop()
    return results


def test_figures_and_table_from_a_results_directory(gpu_results: Path, tmp_path: Path) -> None:
    from tfhost.report import render_records

    out = tmp_path / "report"
    written = render_records([gpu_results], out)
    names = sorted(p.name for p in written)
    assert names == sorted([
        "epoch_time.png", "images_per_sec.png", "speedup.png",
        "r50-gpus-4.utilisation.png", "throughput.png", "report.md",
    ])
    for path in written:
        if path.suffix == ".png":
            width, height = _png_size(path)
            assert width >= 600 and height >= 400, path
    report = (out / "report.md").read_text()
    assert "| r50-gpus-4.json | cifar10 | resnet50v2 | 4 × NVIDIA H100 80GB HBM3 | 4 |" in report
    assert "| 2 | 11.075 | 4,560.0 | 1.90 | 95% |" in report  # median epoch after warm-up
    assert "| 4 | 5.845 | 8,640.0 | 3.60 | 90% |" in report
    assert "![speedup](speedup.png)" in report
    # the CPU run is in the table and the bars, not in the GPU scaling curve
    assert "| r50-cpu.json | cifar10 | resnet50v2 | 1 × AMD EPYC 7B13 |" in report
    assert report.count("## Scaling") == 1


def test_bars_put_cpu_before_gpu(gpu_results: Path) -> None:
    from tfhost.report import collect, throughput_rows

    rows = throughput_rows(collect([gpu_results]).records)
    assert [(r["kind"], r["images_per_sec"]) for r in rows] == [
        ("CPU", 31.5), ("GPU", 2400.0), ("GPU", 4560.0), ("GPU", 8640.0)]
    assert rows[3]["label"] == "resnet50v2\n4 GPUs\nfp32"


def test_a_jsonl_log_and_single_files_work_too(gpu_results: Path, tmp_path: Path) -> None:
    from tfhost.report import render_records

    written = render_records([gpu_results / "records.jsonl"], tmp_path / "a")
    assert {p.name for p in written} >= {"speedup.png", "throughput.png", "report.md"}
    written = render_records([gpu_results / "r50-cpu.json"], tmp_path / "b")
    assert sorted(p.name for p in written) == ["report.md", "throughput.png"]


def test_scaling_summary_takes_precedence(tmp_path: Path) -> None:
    from tfhost.report import render_records
    from tfhost.scaling import StudyPlan, summarise, write_summary

    plan = StudyPlan(counts=[1, 2], unit="CPU replicas")
    runs = [(n, _record(n, rate, "CPU", "cnn"), f"r{n}.json") for n, rate in ((1, 300.0),
                                                                            (2, 450.0))]
    write_summary(summarise(runs), plan, tmp_path)
    written = render_records([tmp_path / "scaling.json"], tmp_path / "out")
    assert sorted(p.name for p in written) == [
        "epoch_time.png", "images_per_sec.png", "report.md", "speedup.png"]
    assert "| CPU replicas | epoch time (s)" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        (json.dumps({"hello": 1}), "is not a workloads record"),
    ],
)
def test_bad_inputs_name_the_file(tmp_path: Path, content: str | None, message: str) -> None:
    from tfhost.report import render_records

    from workloads.errors import WorkloadError

    path = tmp_path / "x.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(WorkloadError, match=message):
        render_records([path], tmp_path / "out")


def test_empty_directory_says_what_to_give(tmp_path: Path) -> None:
    from tfhost.report import render_records

    from workloads.errors import WorkloadError

    (tmp_path / "empty").mkdir()
    with pytest.raises(WorkloadError, match="no records, scaling summaries or GPU monitor CSVs"):
        render_records([tmp_path / "empty"], tmp_path / "out")
