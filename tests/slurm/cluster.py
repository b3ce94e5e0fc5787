"""Start and stop scripts/slurm/local-cluster.sh (a real one-machine SLURM cluster on 127.0.0.1)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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


@contextmanager
def local_cluster(state: Path, **settings: str) -> Iterator[dict[str, str]]:
    """The environment (SLURM_CONF set) of a cluster started under `state`, stopped on leaving.

    `settings` are local-cluster.sh's TFHOST_SLURM_* variables (e.g. TFHOST_SLURM_NODES)."""
    env = {**os.environ, "TFHOST_SLURM_DIR": str(state),
           "TFHOST_SLURM_PORT": str(free_port_pair()), **settings}
    started = subprocess.run([CLUSTER, "start"], env=env, capture_output=True, text=True,
                             check=False)
    if started.returncode != 0:
        subprocess.run([CLUSTER, "stop"], env=env, check=False, capture_output=True)
        raise RuntimeError(f"local SLURM cluster did not start: {started.stderr.strip()}")
    env["SLURM_CONF"] = started.stdout.strip().split("=", 1)[1]
    try:
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, check=False, capture_output=True)
        subprocess.run([CLUSTER, "stop"], env=env, check=False, capture_output=True)


def node_state(env: dict[str, str], name: str) -> tuple[str, str]:
    """A node's (State, Reason) as ``scontrol show node`` gives them (the reason without the
    ``[user@time]`` SLURM appends)."""
    shown = subprocess.run(["scontrol", "show", "node", name], env=env, capture_output=True,
                           text=True, check=True).stdout
    state = re.search(r"State=(\S+)", shown)
    reason = re.search(r"^\s*Reason=(.*?)(?: \[[^]@]*@[^]]*\])?$", shown, re.MULTILINE)
    return (state.group(1) if state else "", reason.group(1) if reason else "")


def run_a_job_on_localhost(env: dict[str, str], cwd: Path, seconds: int) -> None:
    """Submit a job that sleeps ``seconds`` on the real node and wait (up to 30 s) until it runs:
    a node with work on it, for a drain to wait for."""
    subprocess.run(["sbatch", "--nodelist", "localhost", "--output", "/dev/null", "--wrap",
                    f"sleep {seconds}"], env=env, cwd=cwd, check=True, capture_output=True)
    for _ in range(60):
        if "RUNNING" in subprocess.run(["squeue", "-h", "-o", "%T"], env=env, text=True,
                                       capture_output=True, check=True).stdout:
            return
        time.sleep(0.5)
