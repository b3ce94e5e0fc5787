"""SLURM runs the health check and drains the node that fails; it comes back after a pass.

A cluster of its own (the session's cluster keeps running jobs for the other tests) whose
slurm.conf names ``HealthCheckProgram`` = an installed copy of ``scripts/slurm/health-check.sh``
(root's, 0755, with ``workloads-health.conf`` beside it, as scripts/slurm/README.md installs it),
every 2 s in any state. slurmd runs it as root with its own bare environment; the only
stand-ins are the readings: the settings point ``workloads health`` at a kernel log the
test writes (the driver's real line formats) and at a PCI tree with no NVIDIA GPU. On a
GPU node the same program reads the journal, sysfs and NVML.

Waiting is polling the node's state (or the state file's run counter) with a deadline,
never a sleep that hopes a run happened.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.slurm.conftest import CLUSTER, REPO, free_port_pair
from tests.workloads import kernel_log_fixture as klog
from workloads.accept.health import slurm

WORKLOADS = Path(sys.executable).parent / "workloads"
NODE = "localhost"


@dataclass
class HealthCluster:
    env: dict[str, str]
    base: Path
    kernel_log: Path
    state: Path
    sysfs: Path

    def node(self) -> slurm.NodeState:
        done = subprocess.run(["scontrol", "show", "node", NODE], env=self.env,
                              capture_output=True, text=True, timeout=30, check=True)
        return slurm.parse_show(done.stdout)

    def runs(self) -> int:
        try:
            return int(json.loads(self.state.read_text())["runs"])
        except (OSError, ValueError, KeyError):
            return 0

    def health(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(WORKLOADS), "health", "--kernel-log", str(self.kernel_log), "--sysfs-pci",
             str(self.sysfs), "--state", str(self.state), *args],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )


def wait_for(what: str, condition: Callable[[], bool], timeout: float = 90.0) -> None:
    give_up = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HealthCluster]:
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd, munged)")
    if shutil.which("slurmctld") is None:
        pytest.fail("slurm-wlm missing: scripts/install-test-deps.sh installs it")
    base = tmp_path_factory.mktemp("health-cluster")
    etc = base / "etc"
    etc.mkdir(mode=0o755)
    program = etc / "workloads-health-check"
    shutil.copyfile(REPO / "scripts" / "slurm" / "health-check.sh", program)
    program.chmod(0o755)
    kernel_log = klog.write(base / "kern.log", klog.noise(1.0, 30))
    sysfs = base / "pci"
    sysfs.mkdir()
    state = base / "state" / "health-state.json"
    conf = base / "cluster" / "slurm.conf"
    settings = etc / "workloads-health.conf"
    settings.write_text(
        "# written by tests/slurm/test_health_drain.py\n"
        f"WORKLOADS={WORKLOADS}\n"
        f"SLURM_CONF={conf}\n"
        "DEADLINE=20\n"
        f"HEALTH_ARGS=--kernel-log {kernel_log} --sysfs-pci {sysfs} --state {state}\n"
    )
    settings.chmod(0o644)
    env = {
        **os.environ,
        "TFHOST_SLURM_DIR": str(base / "cluster"),
        "TFHOST_SLURM_PORT": str(free_port_pair()),
        "TFHOST_SLURM_HEALTHCHECK": str(program),
        "TFHOST_SLURM_HEALTHCHECK_INTERVAL": "2",
    }
    started = subprocess.run([CLUSTER, "start"], env=env, capture_output=True, text=True,
                             check=False)
    if started.returncode != 0:
        pytest.fail(f"local SLURM cluster did not start: {started.stderr.strip()}")
    env["SLURM_CONF"] = str(conf)
    try:
        yield HealthCluster(env, base, kernel_log, state, sysfs)
    finally:
        subprocess.run([CLUSTER, "stop"], env=env, check=False, capture_output=True)


def test_slurmd_drains_a_failing_node_with_the_finding_and_resumes_it(
    cluster: HealthCluster,
) -> None:
    wait_for("a first passing health run", lambda: cluster.runs() >= 1)
    wait_for("the node to be idle", lambda: not cluster.node().drained)

    # The GPU at 0000:3b:00 falls off the bus: the driver's XID 79 reaches the kernel log.
    with cluster.kernel_log.open("a") as log:
        log.write(klog.xid_line(5000.25, "0000:3b:00", 79) + "\n")
    wait_for("the node to drain", lambda: cluster.node().drained)
    drained = cluster.node()
    assert drained.ours, drained
    assert drained.reason is not None
    assert drained.reason.startswith(
        "workloads-health: PCI 0000:3b:00 XID 79 GPU has fallen off the bus"
    ), drained.reason
    assert "reboot the node" in drained.reason

    # Later runs see no new line, but the XID's reboot is not done: the node stays drained.
    seen = cluster.runs()
    wait_for("two more health runs", lambda: cluster.runs() >= seen + 2)
    assert cluster.node().ours
    still = cluster.health("--json")
    assert still.returncode == 1, still.stderr
    rows = json.loads(still.stdout)["findings"]
    assert any(r["item"] == "XID 79" and "still open" in r["reason"] for r in rows)

    # The operator reset the GPU and says so; the next run slurmd starts passes and resumes.
    cleared = cluster.health("--clear")
    assert cleared.returncode == 0, cleared.stdout + cleared.stderr
    assert "cleared: PCI 0000:3b:00 XID 79 (reboot the node)" in cleared.stdout
    wait_for("the node to resume", lambda: not cluster.node().drained)
    assert cluster.node().reason is None


def test_a_node_an_administrator_drained_stays_drained(cluster: HealthCluster) -> None:
    env = cluster.env
    subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=drain",
                    "reason=maintenance: new DIMM"], env=env, check=True, timeout=30)
    try:
        seen = cluster.runs()
        wait_for("two health runs after the drain", lambda: cluster.runs() >= seen + 2)
        node = cluster.node()
        assert node.drained and node.reason == "maintenance: new DIMM", node
    finally:
        subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"], env=env,
                       check=False, timeout=30)


def test_the_program_refuses_settings_others_can_write(tmp_path: Path) -> None:
    program = tmp_path / "workloads-health-check"
    shutil.copyfile(REPO / "scripts" / "slurm" / "health-check.sh", program)
    program.chmod(0o755)
    settings = tmp_path / "workloads-health.conf"
    settings.write_text("WORKLOADS=/bin/true\n")
    settings.chmod(0o664)
    done = subprocess.run([str(program)], env={}, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"workloads-health-check: {settings} is writable by group or others (mode 664): "
        "chmod go-w"
    )
    settings.chmod(0o644)
    settings.write_text("WORKLOADS=/bin/true\nPATH=/tmp/evil\n")
    done = subprocess.run([str(program)], env={}, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 2 and "unknown setting 'PATH'" in done.stderr
