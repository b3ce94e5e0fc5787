"""Keep TensorFlow's multi-worker gRPC servers on the node's own address.

TensorFlow's worker server has no authentication, and it listens on every
interface (``0.0.0.0``/``[::]``) whatever the cluster spec says: its C++ code
hard-codes the wildcard. On a node with a public or shared interface beside the
cluster network, anyone who reaches the port can run TensorFlow operations as
the job's user. ``bindaddr.c`` (beside this file), preloaded into the worker,
turns the wildcard bind on the job's port range into a bind to the address the
other workers reach this node at (``address.py``: the route towards the job's
other nodes, never loopback for a job across nodes).

The library is built with the C compiler into a directory only this user can
write and checked before every use (``library.py``), or taken from
``$WORKLOADS_BIND_SHIM`` (run-workloads.sh builds it on the host and mounts it
into Apptainer containers). Preloading needs a new process image, so the worker
re-executes itself once, before TensorFlow loads, and then checks that the
library is mapped.

``WORKLOADS_WORKER_BIND=any`` keeps TensorFlow's own behaviour (every interface)
for networks that are trusted end to end; the record says which was used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from workloads.errors import WorkloadError
from workloads.netbind.address import ADDRESS_OVERRIDE_ENV, node_address, worker_address
from workloads.netbind.library import MODE_ENV, SHIM_ENV, is_mapped, shim_library

__all__ = ["ADDRESS_ENV", "ADDRESS_OVERRIDE_ENV", "MODE_ENV", "PORTS_ENV", "REEXEC_ENV",
           "SHIM_ENV", "Binding", "keep_workers_on_node", "node_address", "shim_library",
           "worker_address"]

ADDRESS_ENV = "WORKLOADS_BIND_ADDRESS"
PORTS_ENV = "WORKLOADS_BIND_PORTS"
REEXEC_ENV = "WORKLOADS_BIND_REEXEC"  # the pid that re-executed itself with the library


@dataclass(frozen=True)
class Binding:
    """Where this process's worker listens: one address (``node``) or every interface (``any``)."""

    mode: str
    address: str | None
    ports: str | None

    def as_record(self) -> dict[str, str | None]:
        return {"mode": self.mode, "address": self.address, "ports": self.ports}


def keep_workers_on_node(node: str, port_low: int, port_high: int,
                         peers: Sequence[str] = ()) -> Binding:
    """Make this process's TensorFlow worker listen on `node`'s address only.

    `peers` are the job's other nodes (none: a job on one node). Returns at once
    when this process already runs with the verified library preloaded for that
    address; otherwise re-executes the same command with it (this call does not
    return then). ``WORKLOADS_WORKER_BIND=any`` skips all of it.
    """
    mode = os.environ.get(MODE_ENV, "node")
    if mode == "any":
        return Binding("any", None, None)
    if mode != "node":
        raise WorkloadError(f"{MODE_ENV}={mode} is not 'node' or 'any'",
                            f"unset {MODE_ENV} (node) or set it to any")
    address = worker_address(node, peers)
    ports = f"{port_low}-{port_high}"
    library = shim_library()
    preloaded = os.environ.get("LD_PRELOAD", "").split()
    if os.environ.get(REEXEC_ENV) == str(os.getpid()):
        # This is the re-executed image: the loader must have mapped what was verified.
        if not (str(library) in preloaded and os.environ.get(ADDRESS_ENV) == address
                and os.environ.get(PORTS_ENV) == ports and is_mapped(library)):
            raise WorkloadError(
                f"the worker bind library {library} is not loaded in the restarted worker",
                f"try 'LD_PRELOAD=LIBRARY /bin/true', or {MODE_ENV}=any on a trusted network",
            )
        return Binding("node", address, ports)
    env = {**os.environ, ADDRESS_ENV: address, PORTS_ENV: ports, REEXEC_ENV: str(os.getpid()),
           "LD_PRELOAD": " ".join([str(library), *preloaded])}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    raise AssertionError("unreachable: execve returned")  # pragma: no cover
