"""Keep TensorFlow's multi-worker gRPC servers on the node's own address.

TensorFlow's worker server has no authentication, and it listens on every
interface (``0.0.0.0``/``[::]``) whatever the cluster spec says: its C++ code
hard-codes the wildcard. On a node with a public or shared interface beside the
cluster network, anyone who reaches the port can run TensorFlow operations as
the job's user. ``bindaddr.c`` (beside this file), preloaded into the worker,
turns the wildcard bind on the job's port range into a bind to the address the
other workers use for this node (what its SLURM node name resolves to).

The library is taken from ``$WORKLOADS_BIND_SHIM`` if set (run-workloads.sh
builds it on the host and mounts it into Apptainer containers), else built once
with the C compiler into ``$WORKLOADS_CACHE/netbind/``. Preloading needs a new
process image, so the worker re-executes itself once, before TensorFlow loads.

``WORKLOADS_WORKER_BIND=any`` keeps TensorFlow's own behaviour (every interface)
for networks that are trusted end to end; the record says which was used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from workloads.errors import WorkloadError

SOURCE = Path(__file__).with_name("bindaddr.c")
SHIM_ENV = "WORKLOADS_BIND_SHIM"
MODE_ENV = "WORKLOADS_WORKER_BIND"
ADDRESS_ENV = "WORKLOADS_BIND_ADDRESS"
PORTS_ENV = "WORKLOADS_BIND_PORTS"


@dataclass(frozen=True)
class Binding:
    """Where this process's worker listens: one address (``node``) or every interface (``any``)."""

    mode: str
    address: str | None
    ports: str | None

    def as_record(self) -> dict[str, str | None]:
        return {"mode": self.mode, "address": self.address, "ports": self.ports}


def node_address(node: str) -> str:
    """The address the other workers reach `node` at: its first IPv4, else its first IPv6."""
    try:
        infos = socket.getaddrinfo(node, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WorkloadError(
            f"the SLURM node name {node!r} does not resolve ({exc.strerror})",
            "make the node names resolvable on every node (DNS or /etc/hosts)",
        ) from exc
    addresses = [str(info[4][0]) for info in infos]
    v4 = [address for address in addresses if ":" not in address]
    return (v4 or addresses)[0]


def _cache_dir() -> Path:
    base = Path(os.environ.get("WORKLOADS_CACHE", Path.home() / ".cache" / "workloads"))
    return base / "netbind"


def shim_library() -> Path:
    """The preload library: $WORKLOADS_BIND_SHIM, or built from bindaddr.c (cached by hash)."""
    given = os.environ.get(SHIM_ENV)
    if given:
        if not Path(given).is_file():
            raise WorkloadError(f"{SHIM_ENV}={given} is not a file",
                                "point it at libbindaddr.so or unset it to build one here")
        return Path(given)
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    built = _cache_dir() / f"libbindaddr-{digest}.so"
    if built.is_file():
        return built
    wanted = os.environ.get("CC")
    compiler = shutil.which(wanted) if wanted else shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise WorkloadError(
            "no C compiler to build the library that keeps TensorFlow's unauthenticated "
            "workers on the node's address",
            f"install gcc, set {SHIM_ENV} to a built libbindaddr.so, or set {MODE_ENV}=any "
            "on a network that is trusted end to end",
        )
    built.parent.mkdir(parents=True, exist_ok=True)
    partial = built.with_name(f".{built.name}.{os.getpid()}")
    result = subprocess.run(
        [compiler, "-O2", "-shared", "-fPIC", "-o", str(partial), str(SOURCE)],
        capture_output=True, text=True, check=False,
    )
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        first = (result.stderr.strip().splitlines() or ["no output"])[0]
        raise WorkloadError(f"building the worker bind library failed ({first})",
                            f"fix the compiler ({compiler}) or set {MODE_ENV}=any")
    partial.replace(built)  # atomic: tasks on one node may build it at the same moment
    return built


def keep_workers_on_node(node: str, port_low: int, port_high: int) -> Binding:
    """Make this process's TensorFlow worker listen on `node`'s address only.

    Returns at once when this process already runs with the library preloaded
    for that address; otherwise re-executes the same command with it (this call
    does not return then). ``WORKLOADS_WORKER_BIND=any`` skips all of it.
    """
    mode = os.environ.get(MODE_ENV, "node")
    if mode == "any":
        return Binding("any", None, None)
    if mode != "node":
        raise WorkloadError(f"{MODE_ENV}={mode} is not 'node' or 'any'",
                            f"unset {MODE_ENV} (node) or set it to any")
    address = node_address(node)
    ports = f"{port_low}-{port_high}"
    library = shim_library()
    preloaded = os.environ.get("LD_PRELOAD", "").split()
    if (str(library) in preloaded and os.environ.get(ADDRESS_ENV) == address
            and os.environ.get(PORTS_ENV) == ports):
        return Binding("node", address, ports)
    env = {**os.environ, ADDRESS_ENV: address, PORTS_ENV: ports,
           "LD_PRELOAD": " ".join([str(library), *preloaded])}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    raise AssertionError("unreachable: execve returned")  # pragma: no cover
