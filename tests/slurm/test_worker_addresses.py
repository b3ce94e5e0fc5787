"""What a multi-worker job exposes: the cluster spec it builds and what TensorFlow binds.

TensorFlow's gRPC server has no authentication and no bind address: it listens on
every interface (``[::]:port``) whatever address the cluster spec gives it
(``grpc_server_lib.cc`` passes ``0.0.0.0:<port>`` to gRPC). The README says so and
tells operators to keep the job's port range on a trusted network; this test keeps
that statement true. If a TensorFlow release starts binding to the spec's address,
the second assertion fails and the README (and ``multiworker.py``) should change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.slurm.conftest import REPO

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
listening = []
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    for line in open(table).read().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
            listening.append(local.rsplit(":", 1)[0])
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
