"""Which of this node's addresses the job's other nodes reach its workers at.

Why not just the node name's resolution: Debian and Ubuntu write
``127.0.1.1 <hostname>`` into /etc/hosts, so on such a node its own name means
loopback, and a worker bound there is unreachable from every other node (the
multi-node job hangs while the workers wait for each other). So the choice, in
order:

1. ``$WORKLOADS_WORKER_ADDRESS``, when set: an address of this node;
2. with other nodes in the job: the source address of this node's route to
   them (their names resolved as TensorFlow will resolve them; a UDP socket's
   ``connect`` + ``getsockname``, which sends no packet);
3. this node's name resolution, first IPv4, but not loopback when other nodes
   must reach it;
4. a job on one node keeps whatever its name resolves to, loopback included
   (every worker is local); a job across nodes left with loopback only stops
   with one line naming the fix.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Iterable, Sequence

from workloads.errors import WorkloadError, clip

ADDRESS_OVERRIDE_ENV = "WORKLOADS_WORKER_ADDRESS"
PEERS_TRIED = 8  # a misconfigured cluster costs each task at most this many name lookups


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, and IPv4-mapped loopback (``::ffff:127.0.1.1``)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _usable(address: str) -> bool:
    """An address the preload library can bind: no link-local scope, assigned to this node."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return False
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False
    return True


def resolved(name: str) -> list[str]:
    """`name`'s addresses, IPv4 first, in the resolver's order; [] if it does not resolve."""
    try:
        infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return []
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    return [a for a in addresses if ":" not in a] + [a for a in addresses if ":" in a]


def route_source(destination: str) -> str | None:
    """The local address this node sends from towards `destination`; None without a route."""
    family = socket.AF_INET6 if ":" in destination else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect((destination, 9))  # UDP: only a route lookup, nothing is sent
        except OSError:
            return None
        return str(probe.getsockname()[0])


def _towards_peers(peers: Iterable[str]) -> str | None:
    for count, peer in enumerate(peers):
        if count == PEERS_TRIED:
            break
        for destination in resolved(peer):
            if is_loopback(destination):
                continue
            source = route_source(destination)
            if source and not is_loopback(source) and _usable(source):
                return source
    return None


def node_address(node: str) -> str:
    """What `node` resolves to here, first IPv4 (a one-node job's workers all live here)."""
    addresses = resolved(node)
    if not addresses:
        raise WorkloadError(
            f"the SLURM node name {node!r} does not resolve",
            "make the node names resolvable on every node (DNS or /etc/hosts)",
        )
    return addresses[0]


def _given(text: str, across_nodes: bool) -> str:
    try:
        address = str(ipaddress.ip_address(text))
    except ValueError:
        raise WorkloadError(f"{ADDRESS_OVERRIDE_ENV}={text} is not an IP address",
                            f"set {ADDRESS_OVERRIDE_ENV} to this node's cluster address, "
                            "e.g. 10.1.2.3") from None
    if across_nodes and is_loopback(address):
        raise WorkloadError(f"{ADDRESS_OVERRIDE_ENV}={text} is loopback, which the job's "
                            "other nodes cannot reach",
                            f"set {ADDRESS_OVERRIDE_ENV} to this node's cluster address")
    if not _usable(address):
        raise WorkloadError(f"{ADDRESS_OVERRIDE_ENV}={text} is not an address of this node",
                            f"set {ADDRESS_OVERRIDE_ENV} to one of this node's addresses "
                            "(ip -brief address)")
    return address


def worker_address(node: str, peers: Sequence[str]) -> str:
    """The address this node's workers listen on, for a job on `node` and the nodes `peers`."""
    given = os.environ.get(ADDRESS_OVERRIDE_ENV)
    if given:
        return _given(given.strip(), bool(peers))
    if not peers:
        return node_address(node)
    chosen = _towards_peers(peers)
    if chosen:
        return chosen
    addresses = resolved(node)
    for address in addresses:
        if not is_loopback(address) and _usable(address):
            return address
    raise WorkloadError(
        f"node {clip(node, 30)}: no address other nodes reach (resolves to "
        f"{listed(addresses, 1) or 'nothing'})",
        f"set {ADDRESS_OVERRIDE_ENV}, or map the name to its cluster address",
    )


def listed(names: Sequence[str], shown: int) -> str:
    """The first `shown` names, each cut short, and how many more: a list for one line."""
    first = ", ".join(clip(name, 30) for name in names[:shown])
    more = len(names) - shown
    return f"{first} and {more} more" if more > 0 else first
