"""``workloads style`` end to end: the smoke run, monitoring options, bad input, backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.style.conftest import WeightsFile
from tests.support.messages import says
from tests.workloads.conftest import jax_only
from workloads.cli import main
from workloads.envinfo import cpu_bf16_flags
from workloads.style import weights
from workloads.style.bench import main as bench_main
from workloads.style.config import resolve_precision

REPO = Path(__file__).resolve().parents[2]
QUICK = ["--weights", "random", "--width", "64"]


def run_style(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run ``workloads style`` in-process; argparse's exits become return codes."""
    try:
        code = main(["style", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_smoke_run_writes_png_and_record_whose_loss_falls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "out.png"
    code, out, err = run_style(capsys, *QUICK, "--iterations", "20", "--output", str(output))
    assert code == 0, err
    with Image.open(output) as image:
        assert image.size == (64, 48) and image.mode == "RGB"
    record = json.loads(output.with_suffix(".json").read_text())
    assert record["workload"] == "style" and record["status"] == "ok"
    totals = record["loss_history"]["total"]
    assert len(totals) == 21  # the start and after each of the 20 updates
    assert totals[-1] < 0.8 * totals[0]
    for term in ("content", "style", "tv"):
        assert len(record["loss_history"][term]) == 21
    parts = [record["last_loss"][k] for k in ("content", "style", "tv")]
    assert record["last_loss"]["total"] == pytest.approx(sum(parts), rel=1e-5)
    expected = {
        "width": 64, "height": 48, "iterations": 20, "iterations_run": 20, "learning_rate": 10.0,
        "content_weight": 1.0, "style_weight": 10.0, "tv_weight": 100.0, "pooling": "max",
        "content_weight_blend": 0.2, "style_layer_weight_exp": 1.0, "style_scales": [1.0],
        "initial": "none", "initial_noiseblend": 1.0, "preserve_colors": True, "seed": 0,
        "weights": "random", "keep": "last", "output_is": "last", "output_iteration": 20,
        "converged_at": None, "backend": "tensorflow", "xla": False,
    }  # fmt: skip
    assert {k: record[k] for k in expected} == expected
    # --precision auto resolved for this CPU, the request kept beside it.
    assert record["precision"] == "auto"
    assert record["compute_precision"] == resolve_precision("auto", "CPU", cpu_bf16_flags())
    assert record["iterations_per_sec"] > 0 and record["time_to_last_iteration_s"] > 0
    assert record["env"]["keras_backend"] == "tensorflow"
    log = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(log) == 1 and json.loads(log[0])["output"] == str(output)
    assert "wrote" in out and str(output) in out
    assert "iteration     9  total" in err and "iteration    19  total" in err  # every 10


def test_tolerance_stops_early_and_checkpoints_and_best_image_are_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "run.png"
    code, _, err = run_style(
        capsys, *QUICK, "--iterations", "60", "--print-every", "4", "--checkpoint-every", "8",
        "--tolerance", "0.05", "--tolerance-window", "4", "--keep", "best",
        "--output", str(output),
    )  # fmt: skip
    assert code == 0, err
    record = json.loads(output.with_suffix(".json").read_text())
    stop = record["converged_at"]
    totals = record["loss_history"]["total"]
    assert stop is not None and stop < 60
    assert abs(totals[stop] - totals[stop - 4]) / totals[stop - 4] < 0.05
    assert all(
        abs(totals[i] - totals[i - 4]) / totals[i - 4] >= 0.05 for i in range(4, stop)
    )  # the first such iteration
    # The loss of the image after `stop` updates comes with step stop + 1, and reaches the
    # host at the next sync point (every 4): the loop stops there, 1 to 4 steps later.
    assert 1 <= record["iterations_run"] - stop <= 4
    assert len(totals) == record["iterations_run"] + 1
    best = int(np.nanargmin(totals))
    assert record["best_iteration"] == best == record["output_iteration"]
    assert record["output_is"] == "best"
    assert record["best_loss"]["total"] == min(totals)
    written = sorted(p.name for p in tmp_path.glob("run-*.png"))
    expected = [f"run-{i:04d}.png" for i in range(8, record["iterations_run"] + 1, 8)]
    assert written == expected and record["checkpoints"] == [str(tmp_path / n) for n in expected]
    with Image.open(tmp_path / expected[0]) as image:
        assert image.size == (64, 48)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--content", "{missing}"], "content image {missing} does not exist"),
        (["--content", "{text}"], "is not an image"),
        (["--styles", "{dir}"], "cannot read style image"),
        (["--initial", "{missing}"], "initial image {missing} does not exist"),
        (["--width", "0"], "argument --width: must be > 0"),
        (["--width", "100000"], "use --width"),
        (["--width", "8"], "below the 16 px VGG19 needs"),
        (["--iterations", "0"], "argument --iterations: must be > 0"),
        (["--iterations", "-3"], "argument --iterations: must be > 0"),
        (["--style-weight", "-1"], "argument --style-weight: must be >= 0"),
        (["--content-weight", "-0.5"], "argument --content-weight: must be >= 0"),
        (["--tv-weight", "nan"], "argument --tv-weight: must be >= 0"),
        (["--learning-rate", "0"], "argument --learning-rate: must be > 0"),
        (["--content-weight-blend", "1.5"], "--content-weight-blend: must be between 0 and 1"),
        (["--initial-noiseblend", "-0.1"], "argument --initial-noiseblend: must be >= 0"),
        (["--style-blend-weights", "1", "2"], "2 --style-blend-weights for 1 style images"),
        (["--styles", "{style}", "{style}", "--style-blend-weights", "0", "0"], "not all 0"),
        (["--style-scales", "1", "2", "3"], "3 --style-scales for 1 style images"),
        (["--pooling", "min"], "argument --pooling: invalid choice"),
        (["--precision", "float16"], "argument --precision: invalid choice"),
        (["--weights", "{missing}"], "weights file {missing} does not exist"),
        (["--weights", "{text}"], "neither HDF5"),
        (["--output", "{tmp}/out.jpg"], "is not a .png file"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "text.png").write_text("hello\n")
    (tmp_path / "dir.png").mkdir()
    from workloads.style.images import SAMPLE_STYLE, sample_path

    names = {
        "missing": str(tmp_path / "missing.png"),
        "text": str(tmp_path / "text.png"),
        "dir": str(tmp_path / "dir.png"),
        "style": str(sample_path(SAMPLE_STYLE)),
        "tmp": str(tmp_path / "out"),
    }
    out_dir = tmp_path / "out"
    argv = [a.format(**names) for a in args]
    if "--output" not in argv:
        argv += ["--output", str(out_dir / "out.png")]
    if "--weights" not in argv:
        argv += ["--weights", "random"]
    code, _, err = run_style(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("workloads style: error: ")
    assert says(lines[0], message.format(**names)), lines[0]
    assert not out_dir.exists() or list(out_dir.iterdir()) == []


def test_argparse_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["style", "--width", "-1"])
    assert info.value.code == 2


def test_imagenet_weights_download_once_and_offline_without_cache_fails(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    file_server: str,
    closed_port_url: str,
    vgg_weights_file: WeightsFile,
) -> None:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKLOADS_VGG19_URL", closed_port_url)
    code, _, err = run_style(capsys, "--width", "32", "--output", str(tmp_path / "a.png"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert says(err, f"put {weights.FILE_NAME} in {tmp_path / 'cache' / 'vgg19'}"), err
    assert not (tmp_path / "a.png").exists()

    monkeypatch.setenv("WORKLOADS_VGG19_URL", f"{file_server}/{weights.FILE_NAME}")
    monkeypatch.setenv("WORKLOADS_VGG19_MD5", vgg_weights_file.md5)
    argv = ["--width", "32", "--iterations", "2", "--output", str(tmp_path / "b.png")]
    code, _, err = run_style(capsys, *argv)
    assert code == 0, err
    record = json.loads((tmp_path / "b.json").read_text())
    cached = tmp_path / "cache" / "vgg19" / weights.FILE_NAME
    assert record["weights"] == "imagenet"
    assert record["weights_source"] == f"imagenet:{cached}"


@pytest.mark.slow
def test_jax_backend_gives_the_same_losses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = [*QUICK, "--iterations", "6", "--print-every", "3"]
    code, _, err = run_style(capsys, *common, "--output", str(tmp_path / "tf.png"))
    assert code == 0, err
    # As on the first real GPU host: no TensorFlow, no lowered cost analysis (jax_only).
    env = {**jax_only(dict(os.environ), tmp_path), "JAX_PLATFORMS": "cpu"}
    argv = [sys.executable, "-m", "workloads", "style", *common]
    done = subprocess.run(
        [*argv, "--output", str(tmp_path / "jax.png")],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    tf_record = json.loads((tmp_path / "tf.json").read_text())
    jax_record = json.loads((tmp_path / "jax.json").read_text())
    assert jax_record["backend"] == "jax" and jax_record["xla"] is True
    tf_totals = tf_record["loss_history"]["total"]
    jax_totals = jax_record["loss_history"]["total"]
    assert jax_totals[0] == pytest.approx(tf_totals[0], rel=1e-3)  # same weights, same noise
    assert jax_totals[-1] == pytest.approx(tf_totals[-1], rel=0.05)
    assert jax_totals[-1] < jax_totals[0]
    assert "roofline_error" not in jax_record, jax_record["roofline_error"]
    assert jax_record["flops_per_iteration"] > 0 and jax_record["flops_method"].startswith("xla")


def test_bench_prints_rates_and_writes_a_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    output = tmp_path / "bench.json"
    argv = ["--widths", "32", "48", "--iterations", "3", "--output", str(output)]
    assert bench_main(argv) == 0
    out = capsys.readouterr().out
    record = json.loads(output.read_text())
    assert record["workload"] == "bench-style" and record["status"] == "ok"
    assert [r["width"] for r in record["results"]] == [32, 48]
    assert all(r["iterations_per_sec"] > 0 and r["iterations"] == 3 for r in record["results"])
    assert "it/s" in out and len([line for line in out.splitlines() if "tensorflow" in line]) == 2
    for row in record["results"]:
        # The roofline: FLOPs counted by the backend, a measured peak, MFU from both.
        assert row["flops_per_iteration"] > 0 and row["peak_flops"] > 0
        assert row["mfu"] == pytest.approx(
            row["iterations_per_sec"] * row["flops_per_iteration"] / row["peak_flops"]
        )


def test_bench_reference_runs_the_keras_io_structure_beside_ours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_PEAK_CACHE", str(tmp_path / "peaks.json"))
    output = tmp_path / "bench.json"
    # 48 px: the reference runs all of VGG19, whose fifth VALID pooling needs 32 px per side.
    argv = ["--widths", "48", "--iterations", "3", "--reference", "--output", str(output)]
    assert bench_main(argv) == 0
    [row] = json.loads(output.read_text())["results"]
    reference = row["reference"]
    # Three images through the whole network, every step: well over twice our work.
    assert reference["flops_per_iteration"] > 2 * row["flops_per_iteration"]
    assert row["speedup_vs_reference"] == pytest.approx(
        row["iterations_per_sec"] / reference["iterations_per_sec"]
    )
    assert "keras.io-style reference: ours is " in capsys.readouterr().out
