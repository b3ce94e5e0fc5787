"""Two-worker MultiWorkerMirroredStrategy training through the real sbatch template."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.slurm.conftest import REPO


@pytest.mark.slow
def test_two_task_job_trains_and_the_chief_writes_one_record(
    slurm_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "mw.json"
    env = {
        **slurm_env,
        "MODEL": "cnn",
        "DATA": "synthetic",
        "BATCH_SIZE": "8",
        "OUTPUT": str(out),
        "WORKLOADS_ARGS": "--epochs 2 --steps-per-epoch 3 --log-every 3",
    }
    job = subprocess.run(
        [
            "sbatch",
            "--wait",
            "--nodes=1",
            "--ntasks-per-node=2",
            "--cpus-per-task=1",
            "--gres=none",
            f"--output={tmp_path}/job.out",
            "--time=10",
            "scripts/slurm/cifar10-multinode.sbatch",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    log = (tmp_path / "job.out").read_text() if (tmp_path / "job.out").exists() else ""
    assert job.returncode == 0, f"{job.stderr}\n{log[-3000:]}"
    record = json.loads(out.read_text())
    assert record["distributed"]["strategy"] == "MultiWorkerMirroredStrategy"
    assert record["distributed"]["workers"] == 2
    assert record["distributed"]["nodes"] == 1
    assert record["replicas"] == 2 and record["distributed"]["replicas_across_nodes"] == 2
    assert record["global_batch_size"] == 16 and record["batch_size_per_replica"] == 8
    # Every worker re-executed itself with workloads/netbind: the node's address, the job's ports.
    bind = record["distributed"]["worker_bind"]
    assert bind["mode"] == "node" and bind["address"] == "127.0.0.1", bind
    low, high = (int(port) for port in bind["ports"].split("-"))
    assert high - low == 15
    assert len((tmp_path / "records.jsonl").read_text().splitlines()) == 1  # chief only
    assert log.count("epoch 2:") == 1  # the other worker stays quiet


def test_forced_slurm_outside_a_job_is_one_line(slurm_env: dict[str, str]) -> None:
    env = {k: v for k, v in slurm_env.items() if not k.startswith("SLURM_PROCID")}
    result = subprocess.run(
        [str(REPO / ".venv/bin/workloads"), "cifar10", "--distributed", "slurm"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 2
    errors = [ln for ln in result.stderr.splitlines() if "error:" in ln]
    assert errors == [
        "workloads cifar10: error: --distributed slurm outside a SLURM job step (no "
        "SLURM_PROCID); launch it with srun inside an sbatch job (see scripts/slurm/)"
    ]
