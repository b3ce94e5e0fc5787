"""A real one-machine SLURM cluster (munged, slurmctld, slurmd on 127.0.0.1) for the tests."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

from tests.slurm.cluster import CLUSTER, REPO, free_port_pair, local_cluster

__all__ = ["CLUSTER", "REPO", "free_port_pair", "slurm_env"]


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Environment with SLURM_CONF pointing at a freshly started local cluster."""
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd, munged)")
    if shutil.which("slurmctld") is None:
        pytest.fail("slurm-wlm missing: scripts/install-test-deps.sh installs it")
    with local_cluster(tmp_path_factory.mktemp("slurm")) as env:
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.pop("KERAS_BACKEND", None)
        yield env
