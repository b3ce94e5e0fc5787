"""The worker address on nodes whose /etc/hosts maps their own name to 127.0.1.1, as Debian's does.

Two network namespaces made here stand for two nodes of a job, gpu-node01 and
gpu-node02, joined by a veth pair with private addresses (10.251.7.1 and .2); a
third, gpu-node01 again, has loopback only. Each gets a Debian-like /etc/hosts
through ``ip netns exec`` (which mounts /etc/netns/<name>/hosts over /etc/hosts):
the node's own name on 127.0.1.1, the other node on its address. Everything is
removed afterwards; no packet leaves the namespaces (the route lookups send none,
the one connection runs over the veth pair).

The worker takes the real path (``multiworker.bind_to_node``: SLURM's node list,
the address, the verified library, the re-execution) and binds its port the way
gRPC does; the other node then connects to it by name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.conftest import REPO

NETNS_ETC = Path("/etc/netns")
NODE1, NODE2 = "10.251.7.1", "10.251.7.2"
DEBIAN_HOSTS = """127.0.0.1\tlocalhost
127.0.1.1\t{own}.cluster.example\t{own}
{peer_address}\t{peer}

# The following lines are desirable for IPv6 capable hosts
::1     localhost ip6-localhost ip6-loopback
ff02::1 ip6-allnodes
ff02::2 ip6-allrouters
"""


@dataclass
class Nodes:
    """The namespaces' names: two joined nodes and a lonely one, and a work folder."""

    node1: str
    node2: str
    lonely: str
    work: Path

    def run(self, namespace: str, args: list[str], env: dict[str, str],
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", namespace, *args], env=env, cwd=REPO,
                              capture_output=True, text=True, timeout=timeout, check=False)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2")
    tag = f"tfh-nb{os.getpid()}"
    made = Nodes(f"{tag}a", f"{tag}b", f"{tag}c", tmp_path_factory.mktemp("nodes"))
    etc_existed = NETNS_ETC.exists()
    created: list[str] = []
    try:
        for namespace in (made.node1, made.node2, made.lonely):
            _ip("netns", "add", namespace)
            created.append(namespace)
            _ip("-n", namespace, "link", "set", "lo", "up")
        _ip("-n", made.node1, "link", "add", "cluster0", "type", "veth", "peer", "name",
            "cluster0", "netns", made.node2)
        for namespace, own in ((made.node1, NODE1), (made.node2, NODE2)):
            _ip("-n", namespace, "address", "add", f"{own}/24", "dev", "cluster0")
            _ip("-n", namespace, "link", "set", "cluster0", "up")
        hosts = {
            made.node1: DEBIAN_HOSTS.format(own="gpu-node01", peer="gpu-node02",
                                            peer_address=NODE2),
            made.node2: DEBIAN_HOSTS.format(own="gpu-node02", peer="gpu-node01",
                                            peer_address=NODE1),
            made.lonely: DEBIAN_HOSTS.format(own="gpu-node01", peer="gpu-node02",
                                             peer_address=NODE2),
        }
        for namespace, text in hosts.items():
            (NETNS_ETC / namespace).mkdir(parents=True)
            (NETNS_ETC / namespace / "hosts").write_text(text)
        yield made
    finally:
        for namespace in created:
            subprocess.run(["ip", "netns", "del", namespace], check=False, capture_output=True)
            shutil.rmtree(NETNS_ETC / namespace, ignore_errors=True)
        if not etc_existed:
            with_contents = NETNS_ETC.exists() and any(NETNS_ETC.iterdir())
            if NETNS_ETC.exists() and not with_contents:
                NETNS_ETC.rmdir()


def _slurm_env(nodes: Nodes, node: str, nodelist: str, port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "WORKLOADS_", "LD_PRELOAD")) and k != "CC"}
    env.update({"PYTHONPATH": str(REPO), "WORKLOADS_CACHE": str(nodes.work / "cache"),
                "HOME": str(nodes.work / "home"), "SLURMD_NODENAME": node,
                "SLURM_STEP_NODELIST": nodelist, "SLURM_STEP_NUM_TASKS": "2",
                "SLURM_PROCID": "0", "WORKLOADS_SLURM_PORT_BASE": str(port)})
    return env


# The worker: bind_to_node (re-executes once), then its port bound as gRPC binds it,
# dual-stack [::], listening until the other node has connected once.
WORKER = """
import json, socket, sys
from workloads.cifar10 import multiworker
binding = multiworker.bind_to_node()
port = multiworker.port_base()
server = socket.socket(socket.AF_INET6)
server.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
server.bind(("::", port))
server.listen(1)
named = sorted({info[4][0] for info in socket.getaddrinfo("gpu-node01", None)})
print(json.dumps({"binding": binding.as_record(), "listening": server.getsockname()[0],
                  "own_name_resolves_to": named}), flush=True)
server.settimeout(60)
peer, where = server.accept()
print(json.dumps({"accepted_from": where[0]}), flush=True)
"""
CONNECT = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10).close()
    print("connected")
except OSError as exc:
    print(type(exc).__name__)
"""


def test_the_worker_listens_on_the_cluster_address_and_the_other_node_reaches_it(
        nodes: Nodes) -> None:
    port = 24500
    env = _slurm_env(nodes, "gpu-node01", "gpu-node[01-02]", port)
    worker = subprocess.Popen(["ip", "netns", "exec", nodes.node1, sys.executable, "-c", WORKER],
                              env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert worker.stdout is not None
        first = worker.stdout.readline()
        assert first, worker.stderr.read() if worker.stderr else ""
        found = json.loads(first)
        # /etc/hosts says what Debian's says: the node's own name is loopback here.
        assert found["own_name_resolves_to"] == ["127.0.1.1"]
        assert found["binding"] == {"mode": "node", "address": NODE1,
                                    "ports": f"{port}-{port + 15}"}
        assert found["listening"] == f"::ffff:{NODE1}"
        # Nothing listens on the name's loopback address; the other node reaches it by name.
        local = nodes.run(nodes.node1, [sys.executable, "-c", CONNECT, "127.0.1.1", str(port)],
                          env)
        assert local.stdout.strip() == "ConnectionRefusedError", local
        remote = nodes.run(nodes.node2, [sys.executable, "-c", CONNECT, "gpu-node01", str(port)],
                           env)
        assert remote.stdout.strip() == "connected", remote
        assert json.loads(worker.stdout.readline()) == {"accepted_from": f"::ffff:{NODE2}"}
        assert worker.wait(timeout=30) == 0
    finally:
        worker.kill()
        worker.wait()


def test_a_job_across_nodes_with_only_loopback_stops_in_one_line(nodes: Nodes) -> None:
    env = _slurm_env(nodes, "gpu-node01", "gpu-node[01-02]", 24600)
    out = nodes.work / "lonely.json"
    done = nodes.run(nodes.lonely, [sys.executable, "-m", "workloads", "cifar10",
                                    "--distributed", "slurm", "--data", "synthetic",
                                    "--output", str(out)], env)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [
        "workloads cifar10: error: node gpu-node01: no address other nodes reach (resolves to "
        "127.0.1.1); set WORKLOADS_WORKER_ADDRESS, or map the name to its cluster address"
    ], done.stderr
    assert not out.exists()


# One process per namespace goes through a corpus of /etc/hosts files, written in
# place into the namespace's copy (it checks first that its /etc/hosts is that file).
FAMILY = """
import json, os, sys
from workloads.errors import WorkloadError
from workloads.netbind.address import worker_address
copy = sys.argv[1]
assert os.stat("/etc/hosts")[1:3] == os.stat(copy)[1:3], "not the namespace's hosts file"
results = []
for case in json.loads(sys.stdin.read()):
    with open(copy, "w") as hosts:
        hosts.write(case["hosts"])
    if case["given"]:
        os.environ["WORKLOADS_WORKER_ADDRESS"] = case["given"]
    else:
        os.environ.pop("WORKLOADS_WORKER_ADDRESS", None)
    try:
        results.append(worker_address("gpu-node01", case["peers"]))
    except WorkloadError as exc:
        results.append("refused: " + exc.one_line())
print(json.dumps(results))
"""
OWN = ["127.0.1.1", "127.0.0.1", "127.42.0.9", "::1", NODE1, "10.251.7.99"]
PEER = [NODE2, "10.77.0.2", "127.0.1.1", "::1"]
GIVEN = [None, NODE1, "127.0.1.1"]


def _expected(own: str, peer: str, peers: list[str], given: str | None, joined: bool) -> str:
    """The rule, written out: given > route to a peer > own name if reachable > refuse."""
    if given:
        if given.startswith("127.") and peers:
            return "refused: WORKLOADS_WORKER_ADDRESS=127.0.1.1 is loopback"
        if not joined and not given.startswith("127."):
            return f"refused: WORKLOADS_WORKER_ADDRESS={given} is not an address of this node"
        return given
    if not peers:
        return own
    if joined and peer == NODE2:
        return NODE1
    if joined and own == NODE1:
        return NODE1
    return "refused: node gpu-node01: no address other nodes reach"


@pytest.mark.parametrize("where", ["joined", "lonely"])
def test_the_choice_over_a_family_of_debian_like_hosts_files(nodes: Nodes, where: str) -> None:
    namespace = nodes.node1 if where == "joined" else nodes.lonely
    cases: list[dict[str, Any]] = []
    expected: list[str] = []
    for own in OWN:
        for peer in PEER:
            for peers in (["gpu-node02"], []):
                for given in GIVEN:
                    hosts = f"127.0.0.1 localhost\n{own} gpu-node01\n{peer} gpu-node02\n"
                    cases.append({"hosts": hosts, "peers": peers, "given": given})
                    expected.append(_expected(own, peer, peers, given, where == "joined"))
    env = _slurm_env(nodes, "gpu-node01", "gpu-node[01-02]", 24700)
    done = subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", FAMILY,
                           str(NETNS_ETC / namespace / "hosts")], input=json.dumps(cases),
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    wrong = [(case["hosts"].splitlines()[1:], case["peers"], case["given"], got, want)
             for case, got, want in zip(cases, results, expected, strict=True)
             if not got.startswith(want)]
    assert not wrong, f"{len(wrong)} of {len(cases)} decided wrongly: {wrong[:5]}"
    refusals = [got for got in results if got.startswith("refused")]
    assert all("set WORKLOADS_WORKER_ADDRESS" in line for line in refusals)
    assert all(len(f"workloads cifar10: error: {line}") < 200 for line in refusals)
