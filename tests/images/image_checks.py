"""The two checks every GPU image passes in CI, where there is no GPU.

Through the project's runner (``tfhost.runner``, what ``workloads run`` uses), as
a non-root uid that owns the mounted results directory:

* ``check --json``: exit 0, TensorFlow's CUDA and cuDNN build versions reported,
  no GPU, the matmul on the CPU; ``check --require-gpu``: exit 2, one line;
* a tiny ``cifar10`` on the CPU, its record written to ``/results`` and owned by
  that uid.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

OTHER_UID = 1234


def run_as(image: str, command: list[str], results: Path, memlock: int,
           uid: int = OTHER_UID) -> tuple[int, str, str]:
    """Run ``command`` in ``image`` as ``uid``; returns (exit code, stdout, stderr)."""
    from tfhost.runner import RunSpec, run

    out, err = io.StringIO(), io.StringIO()
    spec = RunSpec(image=image, command=command, results_dir=results, user=f"{uid}:{uid}",
                   network_mode="none", memlock_bytes=memlock, timeout_s=600)
    return run(spec, out=out, err=err), out.getvalue(), err.getvalue()


def results_dir(tmp_path: Path, uid: int = OTHER_UID) -> Path:
    """A results directory owned by ``uid``, as if that user had made it."""
    results = tmp_path / "results"
    results.mkdir()
    os.chown(results, uid, uid)
    return results


def check_reports_cuda_build_and_no_gpu(image: str, results: Path, memlock: int) -> dict[str, Any]:
    """``check --json`` and ``check --require-gpu``; returns the JSON report."""
    code, out, err = run_as(image, ["check", "--json"], results, memlock)
    assert code == 0, out + err
    report = json.loads(out)  # stdout alone: the notes go to stderr
    assert report["ok"] is True and report["gpus"] == []
    assert report["matmul"][0]["device"] == "/CPU:0"
    assert report["cuda_build"] and report["cudnn_build"], report  # a CUDA build of TensorFlow
    assert "no GPU visible" in err

    code, out, err = run_as(image, ["check", "--require-gpu"], results, memlock)
    assert code == 2, out + err
    # TensorFlow's own log lines (cuInit failing without a driver) aside, one line of ours.
    ours = [line for line in err.splitlines() if line.startswith("workloads")]
    assert len(ours) == 1, err
    assert ours[0].startswith("workloads check: error: no GPU is visible to TensorFlow; "), err
    return report


def tiny_cifar10_writes_its_record(image: str, results: Path, memlock: int) -> dict[str, Any]:
    """Two epochs of three synthetic steps on the CPU; returns the record."""
    code, out, err = run_as(image, ["cifar10", "--data", "synthetic", "--epochs", "2",
                                    "--steps-per-epoch", "3", "--batch-size", "16",
                                    "--output", "/results/cifar10.json"], results, memlock)
    assert code == 0, out + err
    record = json.loads((results / "cifar10.json").read_text())
    assert record["workload"] == "cifar10" and record["status"] == "ok"
    assert record["replicas"] == 1 and record["env"]["in_container"] is True
    assert len(record["epoch_times_s"]) == 2 and record["examples_per_sec"] > 0
    for path in (results / "cifar10.json", results / "records.jsonl"):
        stat = path.stat()
        assert (stat.st_uid, stat.st_gid) == (OTHER_UID, OTHER_UID), path
    return record
