"""workloads/netbind: the preload library that keeps TensorFlow's workers on one address.

The library is built with this machine's compiler and loaded into small Python
processes that bind sockets the way gRPC does (IPv4 0.0.0.0, dual-stack [::]);
tests/slurm/test_worker_addresses.py checks a real TensorFlow server with it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workloads.conftest import REPO
from workloads import netbind
from workloads.errors import WorkloadError
from workloads.netbind import address

BIND_PROBE = """
import errno, json, socket, sys
family, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
sock = socket.socket(socket.AF_INET6 if family == "6" else socket.AF_INET)
if family == "6":
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)  # gRPC's dual-stack socket
try:
    sock.bind((host, port))
except OSError as exc:
    print(json.dumps({"error": errno.errorcode[exc.errno]}))
else:
    print(json.dumps({"bound": sock.getsockname()[0]}))
"""


@pytest.fixture()
def cache(netbind_cache: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(netbind.SHIM_ENV, raising=False)
    monkeypatch.delenv(netbind.MODE_ENV, raising=False)
    monkeypatch.delenv(netbind.ADDRESS_OVERRIDE_ENV, raising=False)
    return netbind_cache


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _bind(library: Path, family: str, host: str, port: int, address: str,
          ports: str) -> dict[str, str]:
    env = {**os.environ, "LD_PRELOAD": str(library), netbind.ADDRESS_ENV: address,
           netbind.PORTS_ENV: ports}
    done = subprocess.run([sys.executable, "-c", BIND_PROBE, family, host, str(port)], env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_library_is_built_once_and_cached_by_source_hash(cache: Path) -> None:
    first = netbind.shim_library()
    assert first.parent == cache / f"netbind-{os.geteuid()}"
    assert first.name.startswith("libbindaddr-")
    assert first.parent.stat().st_mode & 0o777 == 0o700
    stamp = first.stat().st_mtime_ns
    assert netbind.shim_library() == first and first.stat().st_mtime_ns == stamp


def test_wildcard_binds_on_the_chosen_ports_move_to_the_address(cache: Path) -> None:
    library = netbind.shim_library()
    port = _free_port()
    ports = f"{port}-{port}"
    assert _bind(library, "4", "0.0.0.0", port, "127.0.0.1", ports) == {"bound": "127.0.0.1"}
    assert _bind(library, "6", "::", port, "127.0.0.1", ports) == {"bound": "::ffff:127.0.0.1"}
    assert _bind(library, "6", "::", port, "::1", ports) == {"bound": "::1"}
    # An IPv6 node address leaves no IPv4 wildcard listener behind.
    assert _bind(library, "4", "0.0.0.0", port, "::1", ports) == {"error": "EADDRNOTAVAIL"}


def test_other_ports_and_explicit_addresses_are_left_alone(cache: Path) -> None:
    library = netbind.shim_library()
    port = _free_port()
    other = f"{port + 1}-{port + 2}" if port < 65000 else f"{port - 2}-{port - 1}"
    assert _bind(library, "4", "0.0.0.0", port, "127.0.0.1", other) == {"bound": "0.0.0.0"}
    assert _bind(library, "4", "127.0.0.1", 0, "127.0.0.1", "0-65535") == {"bound": "127.0.0.1"}
    assert _bind(library, "4", "0.0.0.0", port, "", f"{port}-{port}") == {"bound": "0.0.0.0"}


def test_node_names_resolve_to_an_ipv4_address_first() -> None:
    assert netbind.node_address("localhost") == "127.0.0.1"
    assert netbind.node_address("127.0.0.1") == "127.0.0.1"


BAD_SETTING = """
import json
from workloads import netbind
from workloads.errors import WorkloadError
try:
    netbind.keep_workers_on_node("localhost", 20000, 20015)
except WorkloadError as error:
    print(json.dumps(error.one_line()))
else:
    print(json.dumps("accepted"))
"""


@pytest.mark.parametrize(("env", "message"), [
    ({netbind.MODE_ENV: "everywhere"}, "WORKLOADS_WORKER_BIND=everywhere is not 'node' or 'any'"),
    ({"CC": "/nonexistent/cc"}, "no C compiler to build the library"),
    ({netbind.SHIM_ENV: "/nonexistent/libbindaddr.so"}, "is not a file"),
])
def test_bad_settings_are_one_line_errors(cache: Path, env: dict[str, str], message: str) -> None:
    """In a child with the settings in its own environment: CC (like HOME) is read by every
    build the background jobs' children run, so it is never set in this process's."""
    settings = {name: value for name, value in os.environ.items()
                if name not in ("CC", netbind.SHIM_ENV, netbind.MODE_ENV,
                                netbind.ADDRESS_OVERRIDE_ENV)}
    settings.update({"WORKLOADS_CACHE": str(cache), "HOME": str(cache.parent / "home"),
                     "PYTHONPATH": str(REPO), **env})
    done = subprocess.run([sys.executable, "-c", BAD_SETTING], env=settings,
                          capture_output=True, text=True, timeout=120, check=True)
    said = json.loads(done.stdout.splitlines()[-1])
    assert message in said and "\n" not in said, said
    assert not list(cache.glob("netbind-*/*")), "nothing half-built is left"


class _Resolver:
    """The socket module with another getaddrinfo: one module's view of it, not the process's
    (the background jobs' threads resolve names too)."""

    def __init__(self, getaddrinfo: Callable[..., list[object]]) -> None:
        self.getaddrinfo = getaddrinfo

    def __getattr__(self, name: str) -> object:
        return getattr(socket, name)


def test_an_unresolvable_node_is_a_one_line_error(cache: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # The resolver stands in for DNS: tests send no query off this machine.
    def no_such_name(*_args: object, **_kwargs: object) -> list[object]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(address, "socket", _Resolver(no_such_name))  # that module's view only
    with pytest.raises(WorkloadError, match="'gpu-node07' does not resolve"):
        netbind.keep_workers_on_node("gpu-node07", 20000, 20015)


def test_any_keeps_tensorflows_own_behaviour(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(netbind.MODE_ENV, "any")
    binding = netbind.keep_workers_on_node("gpu-node07", 20000, 20015)  # not even resolved
    assert binding.as_record() == {"mode": "any", "address": None, "ports": None}
    assert not list(cache.glob("netbind*"))


def test_a_bad_bind_mode_stops_a_slurm_run_in_one_line(tmp_path: Path) -> None:
    """Through the CLI: exit 2, one line, before TensorFlow loads or anything is written."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env.update({"SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURMD_NODENAME": "localhost",
                netbind.MODE_ENV: "everywhere", "WORKLOADS_CACHE": str(tmp_path / "cache")})
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "workloads", "cifar10", "--distributed", "slurm",
                           "--data", "synthetic", "--output", str(out)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines == [lines[-1]] and "WORKLOADS_WORKER_BIND=everywhere is not 'node' or 'any'" \
        in lines[-1], done.stderr
    assert not out.exists()


def test_the_help_names_the_bind_settings() -> None:
    done = subprocess.run([sys.executable, "-m", "workloads", "--help"], capture_output=True,
                          text=True, timeout=120, check=True)
    assert netbind.MODE_ENV in done.stdout and netbind.SHIM_ENV in done.stdout
    assert netbind.ADDRESS_OVERRIDE_ENV in done.stdout
