"""gpu_passthrough's libvirt step with Debian 12's real libvirt, in the Debian target container.

The hypervisor VM test (test_vm_hypervisor.py) turns the package step off
(QEMU and libvirt under TCG take over ten minutes of dpkg), and the Rocky test
runs stub rpms; this one installs Debian's own libvirt-daemon-system from
Debian's mirror into the systemd container and runs the role's libvirt tasks
(tasks/libvirt.yml with vars/Debian.yml) on it, so the unit names, the
`systemctl show` reading and the idempotence are checked against the units
Debian ships. Debian's libvirtd runs with `--timeout 120` and exits when idle:
what stays up, and what the role keeps started, are its sockets.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.ansible.playbook import PlaybookRun, run_playbook, write_inventory
from tests.ansible.target import TargetHost, start_target, target_image
from tests.support.background import AFTER_RUN_LAST, set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1200)]

SOCKETS = ["libvirtd.socket", "libvirtd-ro.socket", "libvirtd-admin.socket"]
PLAY = [{
    "name": "The gpu_passthrough role's libvirt step",
    "hosts": "all",
    "gather_facts": False,
    "tasks": [{"name": "Start libvirt's daemons",
               "ansible.builtin.include_role": {
                   "name": "gpu_passthrough", "tasks_from": "libvirt.yml",
                   "vars_from": "Debian.yml"}}],
}]


@dataclass
class LibvirtRuns:
    host: TargetHost
    first: PlaybookRun
    state_after_first: dict[str, str]
    second: PlaybookRun
    third: PlaybookRun
    state_after_third: dict[str, str]


@contextmanager
def _libvirt_runs(workdir: Path) -> Iterator[LibvirtRuns]:
    playbook = workdir / "libvirt.yml"
    playbook.write_text(yaml.safe_dump(PLAY, sort_keys=False))
    host = start_target(target_image(), f"tfhost-libvirt-debian-{os.getpid()}")
    try:
        host.exec("sh", "-c", "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "
                              "--no-install-recommends libvirt-daemon-system >/dev/null")
        # As a site might have left it: the daemon's sockets stopped and disabled.
        host.exec("systemctl", "disable", "--now", *SOCKETS, "libvirtd.service")
        inventory = write_inventory(workdir / "inventory.yml", host.name)

        def run(name: str) -> PlaybookRun:
            return run_playbook(inventory, [], workdir / f"{name}.log",
                                playbook=str(playbook), vault=None)

        first = run("first")
        after_first = host.unit_states([*SOCKETS, "libvirtd.service"])
        second = run("second")
        # Someone stops a socket by hand; the role starts it again.
        host.exec("systemctl", "stop", "libvirtd-ro.socket")
        third = run("third")
        after_third = host.unit_states(SOCKETS)
        yield LibvirtRuns(host, first, after_first, second, third, after_third)
    finally:
        host.remove()


# A self-contained set-up: a background job queued behind the converges, its tests after
# theirs (tests/support/background.py, AFTER_RUN_LAST).
libvirt_runs = pytest.fixture(scope="module", name="libvirt_runs")(set_up_in_background(
    __file__, "libvirt-debian", _libvirt_runs, ensure_engine, run_last=AFTER_RUN_LAST))


def test_the_sockets_are_enabled_and_listening_and_the_service_enabled(
        libvirt_runs: LibvirtRuns) -> None:
    run = libvirt_runs.first
    assert run.returncode == 0, run.explain()
    state = libvirt_runs.state_after_first
    for socket in SOCKETS:
        assert state[socket] == "enabled/active", state
    assert state["libvirtd.service"].startswith("enabled/"), state
    listening = libvirt_runs.host.exec("ls", "/run/libvirt").stdout.split()
    assert {"libvirt-sock", "libvirt-sock-ro", "libvirt-admin-sock"} <= set(listening)


def test_a_second_run_changes_nothing(libvirt_runs: LibvirtRuns) -> None:
    run = libvirt_runs.second
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()


def test_a_stopped_socket_is_started_again(libvirt_runs: LibvirtRuns) -> None:
    run = libvirt_runs.third
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 1, run.explain()
    assert libvirt_runs.state_after_third["libvirtd-ro.socket"] == "enabled/active"

