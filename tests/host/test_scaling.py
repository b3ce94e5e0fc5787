"""The scaling study: its arithmetic, its plan and errors, and a real CPU study end to end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.host import tfhost_cli


def _plan(**fields: Any) -> Any:
    from tfhost.scaling import StudyPlan

    defaults: dict[str, Any] = {"counts": [1, 2], "unit": "CPU replicas"}
    return StudyPlan(**{**defaults, **fields})


@pytest.mark.parametrize(("maximum", "counts"),
                         [(1, [1]), (2, [1, 2]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]),
                          (8, [1, 2, 4, 8])])
def test_power_of_two_counts(maximum: int, counts: list[int]) -> None:
    from tfhost.scaling import power_of_two_counts

    assert power_of_two_counts(maximum) == counts


def test_fixed_images_per_epoch_shrinks_steps_with_the_count() -> None:
    from tfhost.scaling import benchmark_args, steps_per_epoch

    from workloads.errors import WorkloadError

    plan = _plan(images_per_epoch=512, batch_size=16)
    assert [steps_per_epoch(plan, n) for n in (1, 2, 4)] == [32, 16, 8]
    assert steps_per_epoch(_plan(), 4) is None  # whole data set: cifar10 decides
    with pytest.raises(WorkloadError, match="less than one global batch"):
        steps_per_epoch(_plan(images_per_epoch=20, batch_size=16), 2)
    args = benchmark_args(plan, 2, "/r/x.json")
    assert args[:2] == ["cifar10", "--model"]
    assert args[args.index("--steps-per-epoch") + 1] == "16"
    assert args[args.index("--cpu-replicas") + 1] == "2"
    assert args[args.index("--batch-size") + 1] == "16"  # per replica, not scaled
    gpu_args = benchmark_args(_plan(unit="GPUs", gpu_ids=[0, 1], extra_args=["--xla"]), 2, "o")
    assert "--cpu-replicas" not in gpu_args and gpu_args[-1] == "--xla"


def test_summary_figures() -> None:
    from tfhost.scaling import summarise

    def record(rate: float, epochs: list[float]) -> dict[str, Any]:
        return {"examples_per_sec": rate, "epoch_times_s": epochs, "global_batch_size": 64}

    points = summarise([(4, record(700.0, [9.0, 2.0, 2.2]), "c"),
                        (1, record(200.0, [12.0, 7.0, 7.4]), "a"),
                        (2, record(380.0, [10.0]), "b")])
    assert [p.count for p in points] == [1, 2, 4]
    assert [p.epoch_time_s for p in points] == [7.2, 10.0, 2.1]  # warm-up epoch left out
    assert [round(p.speedup, 3) for p in points] == [1.0, 1.9, 3.5]
    assert [round(p.efficiency, 3) for p in points] == [1.0, 0.95, 0.875]


def test_efficiency_is_relative_to_the_smallest_count() -> None:
    from tfhost.scaling import summarise

    runs = [(n, {"examples_per_sec": rate, "epoch_times_s": [1.0]}, "") for n, rate in
            ((2, 100.0), (4, 180.0))]
    assert [p.efficiency for p in summarise(runs)] == [1.0, 0.9]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--counts", "0,1"], "must be distinct numbers >= 1"),
        (["--counts", "1,two"], "is not a comma-separated list"),
        (["--cpu", "--gpu-ids", "0"], "--gpu-ids given with --cpu"),
        (["--gpu-ids", "0,zero"], "is not a list of GPU indices"),
        (["--gpu-ids", "0", "--max", "2"], "--max 2 but only 1 GPUs"),
        (["--cpu", "--images-per-epoch", "8", "--batch-size", "16"],
         "less than one global batch"),
        (["--cpu", "--timeout", "5"], "apply to container runs"),
        (["--batch-size", "0"], "--batch-size: must be > 0"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str, tmp_path: Path) -> None:
    result = tfhost_cli.run_process(["scale", "--output-dir", str(tmp_path / "s"), *argv])
    assert result.returncode == 2
    assert message in result.stderr.strip().splitlines()[-1], result.stderr
    assert not (tmp_path / "s").exists()  # nothing ran, nothing half-written


def test_a_failed_count_stops_the_study_and_keeps_what_finished(tmp_path: Path) -> None:
    from tfhost.scaling import run_study

    from workloads.errors import WorkloadError
    from workloads.records import new_record, write_record

    def launch(plan: Any, count: int, record: Path) -> int:
        if count == 4:
            return 3  # e.g. out of memory
        write_record(new_record("cifar10", examples_per_sec=100.0 * count,
                                epoch_times_s=[2.0, 1.0 / count]), record)
        return 0

    with pytest.raises(WorkloadError, match=r"the run with 4 CPU replicas failed \(exit 3\)"):
        run_study(_plan(counts=[1, 2, 4]), tmp_path, launch)
    summary = json.loads((tmp_path / "scaling.json").read_text())
    assert [p["count"] for p in summary["points"]] == [1, 2]


@pytest.mark.slow
def test_cpu_study_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "study"
    result = tfhost_cli.run_process(["scale", "--cpu", "--counts", "1,2", "--batch-size", "16",
                                     "--images-per-epoch", "256", "--epochs", "2",
                                     "--output-dir", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "scaling.json").read_text())
    assert summary["unit"] == "CPU replicas"
    points = summary["points"]
    assert [p["count"] for p in points] == [1, 2]
    assert points[0]["speedup"] == 1.0 and points[0]["efficiency"] == 1.0
    assert points[1]["efficiency"] == pytest.approx(points[1]["speedup"] / 2)
    for name in ("cifar10-cnn-cpu-replicas-1.json", "cifar10-cnn-cpu-replicas-2.json"):
        record = json.loads((out / name).read_text())
        assert record["status"] == "ok"
    record = json.loads((out / "cifar10-cnn-cpu-replicas-2.json").read_text())
    assert record["replicas"] == 2 and record["global_batch_size"] == 32
    assert record["steps_per_epoch"] == 8  # 256 images / (16 × 2)
    for figure in ("epoch_time.png", "images_per_sec.png", "speedup.png"):
        with Image.open(out / figure) as image:
            assert image.format == "PNG" and image.size[0] >= 600
    assert "scaling study over CPU replicas" in result.stdout
    assert "no GPU in use; scaling over CPU replicas [1, 2]" in result.stdout
    assert "| 2 |" in (out / "report.md").read_text()


def test_each_count_gets_the_first_n_gpus(monkeypatch: pytest.MonkeyPatch,
                                          tmp_path: Path) -> None:
    """Container runs request exactly those GPUs; local runs see exactly those GPUs."""
    import subprocess
    from types import SimpleNamespace

    import tfhost.runner
    import tfhost.scaling
    from tfhost.scaling import container_launcher, run_locally

    specs: list[Any] = []

    def fake_run(spec: Any, **_: Any) -> int:
        specs.append(spec)
        return 0

    monkeypatch.setattr(tfhost.runner, "run", fake_run)
    plan = _plan(counts=[1, 2, 4], unit="GPUs", gpu_ids=[3, 1, 0, 2])
    launch = container_launcher("img", memlock_bytes=-1)
    for n in plan.counts:
        launch(plan, n, tmp_path / f"r{n}.json")
    assert [spec.gpus for spec in specs] == [("3",), ("3", "1"), ("3", "1", "0", "2")]
    assert specs[1].command[-2:] == ["--output", "/results/r2.json"]
    assert specs[1].results_dir == tmp_path

    seen: list[str] = []

    def fake_subprocess(cmd: list[str], env: dict[str, str], check: bool) -> Any:
        seen.append(env["CUDA_VISIBLE_DEVICES"])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(tfhost.scaling, "subprocess", SimpleNamespace(run=fake_subprocess))
    for n in plan.counts:
        run_locally(plan, n, tmp_path / f"r{n}.json")
    assert seen == ["3", "3,1", "3,1,0,2"]


@pytest.mark.docker
@pytest.mark.slow
def test_cpu_study_in_containers(cpu_image: str, memlock: int, tmp_path: Path) -> None:
    out = tmp_path / "study"
    result = tfhost_cli.run_process(["scale", "--cpu", "--image", cpu_image, "--memlock",
                                     str(memlock), "--counts", "1,2", "--batch-size", "8",
                                     "--images-per-epoch", "64", "--epochs", "2",
                                     "--output-dir", str(out)], timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    points = json.loads((out / "scaling.json").read_text())["points"]
    assert [p["count"] for p in points] == [1, 2]
    record = json.loads((out / "cifar10-cnn-cpu-replicas-2.json").read_text())
    assert record["env"]["in_container"] is True and record["replicas"] == 2
