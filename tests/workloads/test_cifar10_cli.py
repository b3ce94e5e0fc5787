"""``workloads cifar10`` end to end: records, replicas, backends, and every bad input."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.workloads.cifar_fixture import write_archive_with_label_10
from tests.workloads.conftest import (
    Archive,
    assert_one_line_error,
    jax_only,
    run_cli,
    without_frameworks,
)

REQUIRED_FIELDS = {
    "workload",
    "model",
    "backend",
    "data",
    "devices",
    "replicas",
    "batch_size_per_replica",
    "global_batch_size",
    "precision",
    "xla",
    "examples_per_sec",
    "step_time_s",
    "epoch_times_s",
    "accuracy",
    "started_at",
    "env",
}
ENV_FIELDS = {"host", "cpu", "gpus", "driver", "versions", "cuda_build", "cudnn_build"}
SMALL = ["--epochs", "2", "--steps-per-epoch", "3", "--batch-size", "8", "--log-every", "2"]


def test_the_issue_command_writes_a_complete_record(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    out = tmp_path / "out.json"
    result = run_cli(
        [
            "cifar10",
            "--model",
            "cnn",
            "--data",
            "synthetic",
            "--steps-per-epoch",
            "30",
            "--epochs",
            "2",
            "--batch-size",
            "64",
            "--output",
            str(out),
        ],
        isolated_env,
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record.keys() >= REQUIRED_FIELDS
    assert record["env"].keys() >= ENV_FIELDS
    assert record["workload"] == "cifar10" and record["status"] == "ok"
    assert record["replicas"] == 1 and record["global_batch_size"] == 64
    assert len(record["epoch_times_s"]) == 2 and record["examples_per_sec"] > 0
    assert record["accuracy"] is None  # synthetic data has no test set
    # The roofline: FLOPs counted from the model (the tutorial CNN is ~105 MFLOP per
    # training example by hand: 2x conv1, 3x conv2 and the dense layers), a measured peak.
    assert record["flops_per_example"] == pytest.approx(1.07e8, rel=0.05)
    assert record["peak_flops"] > 0 and record["peak_dtype"] == "float32"
    # Which peak the MFU divides by, and when it was measured: a CPU has no datasheet.
    assert record["peak"]["source"] in ("measured", "provisional")
    assert record["peak"]["value"] == record["peak_flops"] and record["peak"]["measured_at"]
    assert record["mfu"] == pytest.approx(
        record["examples_per_sec"] * record["flops_per_example"] / record["peak_flops"]
    )
    assert "step 30, loss = " in result.stdout and "examples/sec; " in result.stdout
    log = (tmp_path / "records.jsonl").read_text().splitlines()
    assert json.loads(log[-1])["started_at"] == record["started_at"]


def test_two_replicas_on_two_logical_cpus(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    out = tmp_path / "mirrored.json"
    result = run_cli(["cifar10", *SMALL, "--cpu-replicas", "2", "--output", str(out)], isolated_env)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["replicas"] == 2
    assert record["global_batch_size"] == 16 and record["batch_size_per_replica"] == 8
    assert record["learning_rate"] == pytest.approx(0.02)  # scaled linearly by replicas
    assert len(record["devices"]) == 2


def test_real_format_data_reports_accuracy(
    tmp_path: Path, isolated_env: dict[str, str], cifar_archive: Archive
) -> None:
    env = {**isolated_env, "WORKLOADS_CIFAR10_SHA256": cifar_archive.sha256}
    out = tmp_path / "real.json"
    result = run_cli(
        [
            "cifar10",
            "--data",
            "cifar10",
            "--data-dir",
            str(cifar_archive.path.parent),
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--output",
            str(out),
        ],
        env,
    )
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["data"] == "cifar10" and 0.0 <= record["accuracy"] <= 1.0
    assert record["steps_per_epoch"] == 10  # 40 training images / batch 4
    assert record["test_examples"] == 8


def test_auto_falls_back_to_synthetic_offline(tmp_path: Path, isolated_env: dict[str, str]) -> None:
    out = tmp_path / "auto.json"
    result = run_cli(["cifar10", "--data", "auto", *SMALL, "--output", str(out)], isolated_env)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["data"] == "synthetic" and "cannot download" in record["data_fallback_reason"]
    assert "using synthetic data" in result.stderr


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_keras_backends(backend: str, tmp_path: Path, isolated_env: dict[str, str]) -> None:
    """JAX runs as on the first real GPU host: without TensorFlow, and with XLA's lowered
    cost analysis answering None (``jax_only``): the synthetic data and the FLOP count
    must come without either."""
    out = tmp_path / f"{backend}.json"
    env = (
        jax_only(isolated_env, tmp_path)
        if backend == "jax"
        else {**isolated_env, "KERAS_BACKEND": backend}
    )
    result = run_cli(["cifar10", *SMALL, "--output", str(out)], env)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["backend"] == backend and record["examples_per_sec"] > 0
    method = {"jax": "xla cost_analysis", "torch": "torch FlopCounterMode"}[backend]
    assert record["flops_method"] == method
    # XLA leaves out the products with padding zeros; torch counts them, as the hand count does.
    assert 0.8e8 < record["flops_per_example"] < 1.1e8
    assert record["mfu"] > 0


BAD_INPUTS = [
    (["--batch-size", "0"], "argument --batch-size: must be > 0"),
    (["--batch-size", "x"], "is not a whole number"),
    (["--model", "vgg"], "invalid choice: 'vgg'"),
    (["--gpus", "2"], "--gpus 2 but only 0 GPU(s) visible"),
    (["--epochs", "-1"], "must be > 0"),
    (["--data-dir", "/nonexistent"], "--data-dir given with --data synthetic"),
    (["--data", "cifar10", "--data-dir", "/nonexistent"], "not found"),
    (["--data", "cifar10"], "cannot download"),
    (["--save-model", "m.h5"], "must end in .keras"),
    (["--output", "/proc/forbidden/out.json"], "cannot write to /proc/forbidden"),
    (["--cpu-replicas", "2"], "several replicas need the tensorflow backend"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line(args: list[str], message: str, isolated_env: dict[str, str]) -> None:
    env = {**isolated_env, "KERAS_BACKEND": "jax"} if "--cpu-replicas" in args else isolated_env
    result = run_cli(["cifar10", *args], env)
    assert_one_line_error(result, "cifar10", message)
    results = Path(isolated_env["WORKLOADS_RESULTS"])
    assert not [p for p in results.rglob("*") if p.is_file()]  # nothing half-written


def test_wrong_sha256_and_oversized_batch(
    tmp_path: Path, isolated_env: dict[str, str], cifar_archive: Archive
) -> None:
    data_dir = ["--data", "cifar10", "--data-dir", str(cifar_archive.path.parent)]
    result = run_cli(["cifar10", *data_dir], isolated_env)
    assert_one_line_error(
        result, "cifar10", "has SHA-256", "download cifar-10-python.tar.gz again"
    )
    env = {**isolated_env, "WORKLOADS_CIFAR10_SHA256": cifar_archive.sha256}
    result = run_cli(["cifar10", *data_dir, "--batch-size", "64"], env)
    assert_one_line_error(result, "cifar10", "global batch 64 is larger than the 8 images")


def _hostile_archives(folder: Path) -> list[tuple[Path, str]]:
    """Files a mirror could serve with its own checksum, each with its SHA-256: a real-format
    archive with label 10 in one batch, and an error page where the tar.gz should be."""
    bad_label = folder / "label-10" / "cifar-10-python.tar.gz"
    error_page = folder / "error-page" / "cifar-10-python.tar.gz"
    error_page.parent.mkdir(parents=True)
    error_page.write_bytes(b"<html>mirror error page</html>\n" * 40)
    return [(bad_label, write_archive_with_label_10(bad_label)),
            (error_page, hashlib.sha256(error_page.read_bytes()).hexdigest())]


def test_data_is_refused_before_any_framework_loads(
    tmp_path: Path, isolated_env: dict[str, str], cifar_archive: Archive
) -> None:
    """Every refusal of ``--data cifar10`` comes before TensorFlow (or another backend) is
    imported: the frameworks are shadowed by packages that fail on import, so a check that
    ran after one loaded ends in a traceback instead of its one line."""
    env = without_frameworks(isolated_env, tmp_path)
    cases: list[tuple[list[str], dict[str, str], str]] = [
        (["--data-dir", str(tmp_path / "absent")], {}, "not found"),
        ([], {}, "cannot download"),
        (["--data-dir", str(cifar_archive.path.parent)], {}, "has SHA-256"),
    ]
    for path, digest in _hostile_archives(tmp_path / "hostile"):
        cases.append((["--data-dir", str(path.parent)], {"WORKLOADS_CIFAR10_SHA256": digest},
                      f"{path.parent.name}/{path.name} is "))
    for args, extra, message in cases:
        result = run_cli(["cifar10", "--data", "cifar10", *args], {**env, **extra}, timeout=60)
        assert_one_line_error(result, "cifar10", message)
    # The shadowing works: a run that gets past the data imports its backend and fails.
    result = run_cli(["cifar10", "--steps-per-epoch", "1"], env, timeout=60)
    assert "keras was imported before the input was checked" in result.stderr


def test_xla_mixed_precision_and_saving_across_replicas(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    out, saved = tmp_path / "xla.json", tmp_path / "model.keras"
    args = ["cifar10", *SMALL, "--cpu-replicas", "2", "--xla", "--precision", "mixed"]
    result = run_cli([*args, "--save-model", str(saved), "--output", str(out)], isolated_env)
    assert result.returncode == 0, result.stderr
    record = json.loads(out.read_text())
    assert record["xla"] is True and record["xla_mode"] == "autoclustering"
    assert record["dtype_policy"] == "mixed_bfloat16"  # no GPU: bfloat16 on the CPU
    import keras

    import workloads.cifar10.models  # noqa: F401  (registers the LRN layer for loading)

    model = keras.models.load_model(saved)
    assert model.name == "cifar10_cnn" and model.output_shape == (None, 10)


def test_out_of_memory_names_the_batch_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import tensorflow as tf

    from workloads.cifar10 import train as train_module
    from workloads.errors import OutOfMemory

    class ExhaustedModel:
        def fit(self, *args: object, **kwargs: object) -> None:
            raise tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")

    monkeypatch.setattr(train_module, "build_model", lambda *a, **k: ExhaustedModel())
    config = train_module.TrainConfig(batch_size=512, steps_per_epoch=1, epochs=1)
    with pytest.raises(OutOfMemory, match=r"batch size 512 per replica.*try 256"):
        train_module.train(config, {})
