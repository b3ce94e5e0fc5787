"""workloads/netbind/address: the rules of the worker address that need no network of their own.

The choice on a node with a Debian-like /etc/hosts and a route to another node
runs inside network namespaces in tests/slurm/test_worker_address_choice.py.
"""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workloads.cifar10.multiworker import with_own_address
from workloads.errors import WorkloadError
from workloads.netbind import address


@given(st.integers(0, 2 ** 32 - 1))
def test_every_ipv4_address_is_loopback_exactly_in_127_0_0_0_8(value: int) -> None:
    ip = ipaddress.IPv4Address(value)
    expected = ip.packed[0] == 127
    assert address.is_loopback(str(ip)) is expected
    assert address.is_loopback(f"::ffff:{ip}") is expected  # as a dual-stack socket shows it


@given(st.integers(0, 2 ** 128 - 1))
def test_the_only_ipv6_loopback_is_1_and_mapped_127(value: int) -> None:
    ip = ipaddress.IPv6Address(value)
    mapped = ip.ipv4_mapped
    expected = value == 1 or (mapped is not None and mapped.packed[0] == 127)
    assert address.is_loopback(str(ip)) is expected


@pytest.fixture()
def no_override(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv(address.ADDRESS_OVERRIDE_ENV, raising=False)
    return monkeypatch


@pytest.mark.parametrize(("given_address", "peers", "message"), [
    ("gpu-node01", ["n2"], "WORKLOADS_WORKER_ADDRESS=gpu-node01 is not an IP address"),
    ("127.0.0.1", ["n2"], "WORKLOADS_WORKER_ADDRESS=127.0.0.1 is loopback"),
    ("127.0.1.1", ["n2"], "WORKLOADS_WORKER_ADDRESS=127.0.1.1 is loopback"),
    ("::1", ["n2"], "WORKLOADS_WORKER_ADDRESS=::1 is loopback"),
    ("198.51.100.77", [], "WORKLOADS_WORKER_ADDRESS=198.51.100.77 is not an address of this node"),
])
def test_a_bad_given_address_is_one_line(no_override: pytest.MonkeyPatch, given_address: str,
                                         peers: list[str], message: str) -> None:
    no_override.setenv(address.ADDRESS_OVERRIDE_ENV, given_address)
    with pytest.raises(WorkloadError) as error:
        address.worker_address("gpu-node01", peers)
    line = error.value.one_line()
    assert message in line and "\n" not in line
    assert "set WORKLOADS_WORKER_ADDRESS to" in line


def test_a_given_address_wins_and_a_one_node_job_may_give_loopback(
        no_override: pytest.MonkeyPatch) -> None:
    no_override.setenv(address.ADDRESS_OVERRIDE_ENV, "127.0.0.1")
    assert address.worker_address("no-such-node.invalid", []) == "127.0.0.1"


def test_a_one_node_job_keeps_its_name_resolution(no_override: pytest.MonkeyPatch) -> None:
    assert address.worker_address("localhost", []) == "127.0.0.1"


@pytest.mark.parametrize(("workers", "moved"), [
    (["n1:20000", "n1:20001", "n2:20000"], ["10.0.0.5:20000", "10.0.0.5:20001", "n2:20000"]),
    (["n0:20000", "n10:20000", "n1:20000"], ["n0:20000", "n10:20000", "10.0.0.5:20000"]),
])
def test_only_this_nodes_workers_are_named_by_its_address(workers: list[str],
                                                          moved: list[str]) -> None:
    assert with_own_address(workers, "n1", "10.0.0.5") == moved


def test_an_ipv6_address_is_bracketed_in_the_spec() -> None:
    assert with_own_address(["n1:20000", "n2:20000"], "n1", "fd00::5") == [
        "[fd00::5]:20000", "n2:20000"]


LOOPBACK_SPELLINGS = st.sampled_from(
    ["127.0.0.1", "127.0.1.1", "::1", "0:0:0:0:0:0:0:1", "0000:0000:0000:0000:0000:0000:0000:0001",
     "::ffff:127.0.0.1", "0000:0000:0000:0000:0000:ffff:7f00:0001"])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(peers=st.lists(LOOPBACK_SPELLINGS, min_size=1, max_size=16))
def test_the_loopback_refusal_is_one_short_line_whatever_the_peers(
        no_override: pytest.MonkeyPatch, peers: list[str]) -> None:
    """Eight peers of 39 characters made a 564-character line: the peers are not listed now.

    Every peer is a numeric loopback address (resolved without DNS, never a route to
    another node) and ``localhost`` resolves to loopback: the job must be refused.
    """
    with pytest.raises(WorkloadError) as error:
        address.worker_address("localhost", peers)
    line = f"workloads cifar10: error: {error.value.one_line()}"
    assert "\n" not in line and len(line) < 200, (len(line), line)
    assert "node localhost: no address other nodes reach" in line
    assert "set WORKLOADS_WORKER_ADDRESS" in line


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=300).filter(lambda t: t.strip() != ""))
def test_any_given_address_that_is_not_one_is_refused_in_one_short_line(
        no_override: pytest.MonkeyPatch, text: str) -> None:
    try:
        ipaddress.ip_address(text.strip())
    except ValueError:
        pass
    else:
        return
    no_override.setenv(address.ADDRESS_OVERRIDE_ENV, text.replace("\0", ""))
    with pytest.raises(WorkloadError) as error:
        address.worker_address("gpu-node01", ["n2"])
    line = f"workloads cifar10: error: {error.value.one_line()}"
    assert "\n" not in line and len(line) < 200, (len(line), line)
