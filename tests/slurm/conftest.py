"""A real one-machine SLURM cluster (munged, slurmctld, slurmd on 127.0.0.1) for the tests."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "slurm" / "local-cluster.sh"


def free_port_pair() -> int:
    """A loopback port P with P+1 also free (slurmctld and slurmd)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port < 65535:
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free pair of loopback ports")


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment with SLURM_CONF pointing at a freshly started local cluster."""
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd, munged)")
    if shutil.which("slurmctld") is None:
        pytest.fail("slurm-wlm missing: scripts/install-test-deps.sh installs it")
    state = tmp_path_factory.mktemp("slurm")
    env = {**os.environ, "TFHOST_SLURM_DIR": str(state), "TFHOST_SLURM_PORT": str(free_port_pair())}
    started = subprocess.run(
        [CLUSTER, "start"], env=env, capture_output=True, text=True, check=False
    )
    if started.returncode != 0:
        pytest.fail(f"local SLURM cluster did not start: {started.stderr.strip()}")
    env["SLURM_CONF"] = started.stdout.strip().split("=", 1)[1]
    env["CUDA_VISIBLE_DEVICES"] = ""
    env.pop("KERAS_BACKEND", None)
    try:
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, check=False, capture_output=True)
        subprocess.run([CLUSTER, "stop"], env=env, check=False, capture_output=True)
