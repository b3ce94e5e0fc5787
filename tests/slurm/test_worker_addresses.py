"""What a multi-worker job exposes: the cluster spec it builds and what TensorFlow binds.

TensorFlow's gRPC server has no authentication and no bind address: by itself it
listens on every interface (``[::]:port``) whatever address the cluster spec gives
it (``grpc_server_lib.cc`` passes ``0.0.0.0:<port>`` to gRPC). The first test keeps
that fact checked (if a TensorFlow release starts binding to the spec's address,
it fails, and workloads/netbind may go). The second runs the path every SLURM
worker takes (``netbind.keep_workers_on_node``: build the preload library,
re-execute, start the server) and checks that the worker then listens on the
node's address only.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.slurm.conftest import REPO

# The probes' last step: the local addresses (hex, as /proc/net/tcp* shows them)
# of the sockets listening on `port`.
_LISTENING = """
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            listening.append(local.rsplit(":", 1)[0])
"""

_PROBE = """
import json, os, socket
from workloads.cifar10 import multiworker
import tensorflow as tf

resolver, task = multiworker.resolve(tf)
spec = resolver.cluster_spec().as_dict()

# A real server for this process's own task, on loopback; where does it listen?
probe = socket.socket(); probe.bind(("127.0.0.1", 0)); port = probe.getsockname()[1]; probe.close()
tf.distribute.Server(tf.train.ClusterSpec({"worker": [f"127.0.0.1:{port}"]}),
                     job_name="worker", task_index=0, protocol="grpc", start=True)
""" + _LISTENING + """
print(json.dumps({"spec": spec, "task": task.task_id, "nodes": task.nodes,
                  "listening": listening}))
"""


def test_workers_are_the_job_nodes_and_tensorflow_listens_on_every_interface() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update({
        "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
        "SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "4", "SLURM_JOB_ID": "7",
        "SLURM_STEP_NODELIST": "gpu-node[01-02]", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
    })
    env.pop("SLURM_GPUS_ON_NODE", None)
    result = subprocess.run([sys.executable, "-c", _PROBE], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    base = 20000 + 16 * 7
    assert found["spec"] == {"worker": [f"gpu-node01:{base}", f"gpu-node01:{base + 1}",
                                        f"gpu-node02:{base}", f"gpu-node02:{base + 1}"]}
    assert found["task"] == 1 and found["nodes"] == ["gpu-node01", "gpu-node02"]
    # the wildcard address, IPv4 or IPv6: every interface of the node, not 127.0.0.1
    assert found["listening"] and set(found["listening"]) <= {"00000000", "0" * 32}


_BOUND_PROBE = """
import json, os
from workloads import netbind

port = int(os.environ["PROBE_PORT"])
binding = netbind.keep_workers_on_node("localhost", port, port)  # re-executes this program once
import tensorflow as tf

tf.distribute.Server(tf.train.ClusterSpec({"worker": [f"localhost:{port}"]}),
                     job_name="worker", task_index=0, protocol="grpc", start=True)
""" + _LISTENING + """
print(json.dumps({"binding": binding.as_record(), "listening": listening}))
"""

# 127.0.0.1 in /proc/net/tcp, and as ::ffff:127.0.0.1 on a dual-stack socket in tcp6
LOOPBACK_ONLY = {"0100007F", "0000000000000000FFFF00000100007F"}


def test_with_netbind_the_worker_listens_on_the_node_address_only(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "WORKLOADS_BIND", "WORKLOADS_WORKER")) and k != "CC"}
    env.update({"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "",
                "PROBE_PORT": str(port), "WORKLOADS_CACHE": str(tmp_path / "cache")})
    result = subprocess.run([sys.executable, "-c", _BOUND_PROBE], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["binding"] == {"mode": "node", "address": "127.0.0.1",
                                "ports": f"{port}-{port}"}
    assert found["listening"] and set(found["listening"]) <= LOOPBACK_ONLY, found
