"""SLURM runs the health check and drains the node that fails; it comes back after a pass.

A cluster of its own (the session's cluster keeps running jobs for the other tests) whose
slurm.conf names ``HealthCheckProgram`` = an installed copy of ``scripts/slurm/health-check.sh``
(root's, 0755, with ``workloads-health.conf`` beside it, as scripts/slurm/README.md installs it),
every 2 s in any state. slurmd runs it as root with its own bare environment; the only
stand-ins are the readings: the settings point ``workloads health`` at a kernel log the
test writes (the driver's real line formats) and at a PCI tree with no NVIDIA GPU. On a
GPU node the same program reads the journal, sysfs and NVML. The checks that hang or run
past their deadline are two-line programs named by ``WORKLOADS=`` (one that ignores TERM,
one that sleeps); the check that crashes is the real ``workloads health`` refusing a state
directory others can write.

Waiting is polling the node's state (or the state file's run counter) with a deadline,
never a sleep that hopes a run happened.
"""

from __future__ import annotations

import json
import os
import re
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

# The checkout's own `workloads` (slurmd runs the program with a bare environment, so the
# launcher names this checkout rather than relying on the venv's install pointing at it).
LAUNCHER = f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m workloads "$@"\n'
NODE = "localhost"


@dataclass
class HealthCluster:
    env: dict[str, str]
    base: Path
    kernel_log: Path
    state: Path
    sysfs: Path
    program: Path
    log: Path

    def settings(self, workloads: Path | None = None, deadline: int = 20,
                 state: Path | None = None) -> None:
        """Write the program's settings (root's, 0644, as the README installs them)."""
        workloads = workloads or self.program.parent / "workloads"
        conf = self.program.parent / "workloads-health.conf"
        conf.write_text(
            "# written by tests/slurm/test_health_drain.py\n"
            f"WORKLOADS={workloads}\n"
            f"SLURM_CONF={self.env['SLURM_CONF']}\n"
            f"DEADLINE={deadline}\n"
            f"HEALTH_ARGS=--kernel-log {self.kernel_log} --sysfs-pci {self.sysfs} "
            f"--state {state or self.state}\n"
            f"LOG={self.log}\n"
        )
        conf.chmod(0o644)

    def log_lines(self) -> list[str]:
        try:
            return self.log.read_text().splitlines()
        except OSError:
            return []

    def run_program(self) -> subprocess.CompletedProcess[str]:
        """The program as slurmd runs it: root, SLURMD_NODENAME its only environment."""
        return subprocess.run([str(self.program)], env={"SLURMD_NODENAME": NODE},
                              capture_output=True, text=True, timeout=120, check=False)

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
            [str(self.program.parent / "workloads"), "health", "--kernel-log",
             str(self.kernel_log), "--sysfs-pci", str(self.sysfs), "--state", str(self.state),
             *args],
            env=self.env, capture_output=True, text=True, timeout=120, check=False,
        )


def running(fragment: str) -> bool:
    """Whether a process whose command line contains ``fragment`` is running."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if fragment.encode() in cmdline.read_bytes():
                return True
        except OSError:
            continue
    return False


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
    (etc / "workloads").write_text(LAUNCHER)
    (etc / "workloads").chmod(0o755)
    kernel_log = klog.write(base / "kern.log", klog.noise(1.0, 30))
    sysfs = base / "pci"
    sysfs.mkdir()
    state = base / "state" / "health-state.json"
    conf = base / "cluster" / "slurm.conf"
    env = {
        **os.environ,
        "TFHOST_SLURM_DIR": str(base / "cluster"),
        "TFHOST_SLURM_PORT": str(free_port_pair()),
        "TFHOST_SLURM_HEALTHCHECK": str(program),
        "TFHOST_SLURM_HEALTHCHECK_INTERVAL": "2",
        "TFHOST_SLURM_REBOOT_PROGRAM": "/bin/false",  # `scontrol reboot` needs one; never run
        "TFHOST_SLURM_RETURN_TO_SERVICE": "1",  # a node the test sets DOWN stays DOWN
        "SLURM_CONF": str(conf),
    }
    health = HealthCluster(env, base, kernel_log, state, sysfs, program, base / "health.log")
    health.settings()
    started = subprocess.run([CLUSTER, "start"], env=env, capture_output=True, text=True,
                             check=False)
    if started.returncode != 0:
        pytest.fail(f"local SLURM cluster did not start: {started.stderr.strip()}")
    try:
        yield health
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
    assert re.fullmatch(
        r"workloads-health: XID 79 GPU has fallen off the bus; gpu - 0000:3b:00 sn -; reboot "
        r"the node; since \d{4}-\d\d-\d\dT\d\d:\d\dZ", drained.reason), drained.reason

    # Later runs see no new line, but the XID's reboot is not done: the node stays drained,
    # with the first run's reason and Slurm's time of that first drain.
    seen = cluster.runs()
    wait_for("three more health runs", lambda: cluster.runs() >= seen + 3)
    again = cluster.node()
    assert again.ours and (again.reason, again.reason_time) == (
        drained.reason, drained.reason_time)
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


HANGS = "#!/bin/bash\n# a check stuck in NVML: deaf to TERM\ntrap '' TERM\nsleep 600\n"
SLOW = "#!/bin/bash\n# a check that does not finish by its deadline\nexec sleep 600\n"


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("hangs", r"check hung: no exit on TERM, killed after \d+ s"),
        ("times out", r"check timed out after \d+ s \(deadline 2 s\)"),
        ("crashes", r"check failed \(exit 2\) \.\.\./health-cluster\d+/shared-state is "
         r"writable by others.*"),
    ],
)
def test_a_check_that_fails_itself_drains_and_a_pass_resumes(
    cluster: HealthCluster, how: str, reason: str
) -> None:
    wait_for("the node to be idle", lambda: not cluster.node().drained)
    if how == "crashes":  # the real check, refusing a state directory others could write
        shared = cluster.base / "shared-state"
        shared.mkdir(exist_ok=True)
        shared.chmod(0o777)
        cluster.settings(state=shared / "health-state.json")
    else:
        stand_in = cluster.base / f"check-that-{how.replace(' ', '-')}"
        stand_in.write_text(HANGS if how == "hangs" else SLOW)
        stand_in.chmod(0o755)
        cluster.settings(workloads=stand_in, deadline=2)
    try:
        wait_for("the node to drain", lambda: cluster.node().drained)
        node = cluster.node()
        assert node.ours and node.reason is not None
        assert re.fullmatch(
            rf"workloads-health: {reason}; host; run workloads health by hand; since "
            r"\d{4}-\d\d-\d\dT\d\d:\d\dZ", node.reason), node.reason
        assert len(node.reason) <= slurm.MAX_REASON
        logged = f"{NODE} drained: {node.reason}"
        wait_for("the drain in the log", lambda: any(logged in x for x in cluster.log_lines()))
        if how == "crashes":  # the whole line is in the log
            assert any("is writable by others" in line for line in cluster.log_lines())
    finally:
        cluster.settings()
        # Runs slurmd started before the settings changed finish (and drain) first.
        wait_for("the failing checks to end", lambda: not running(str(cluster.base / "check-")))
        wait_for("the runs begun before to end", lambda: not running(str(cluster.program)))
    wait_for("the node to resume after a passing run", lambda: not cluster.node().drained)


@pytest.fixture
def running_job(cluster: HealthCluster) -> Iterator[str]:
    """A job on the node, so a reboot asked for ASAP stays pending (it waits for the job)."""
    done = subprocess.run(["sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 300"],
                          env=cluster.env, capture_output=True, text=True, timeout=30, check=True)
    job = done.stdout.strip()
    try:
        wait_for("the job to run", lambda: subprocess.run(
            ["squeue", "-h", "-j", job, "-o", "%T"], env=cluster.env, capture_output=True,
            text=True, timeout=30, check=False).stdout.strip() == "RUNNING")
        yield job
    finally:
        subprocess.run(["scancel", job], env=cluster.env, check=False, timeout=30)


def _scontrol(cluster: HealthCluster, *args: str) -> None:
    subprocess.run(["scontrol", *args], env=cluster.env, check=True, timeout=30,
                   capture_output=True)


@pytest.mark.parametrize("held", ["DOWN", "reboot pending"])
def test_a_down_node_or_one_waiting_for_a_reboot_is_left_as_it_is(
    cluster: HealthCluster, held: str, request: pytest.FixtureRequest
) -> None:
    wait_for("the node to be idle", lambda: not cluster.node().drained)
    if held == "DOWN":
        _scontrol(cluster, "update", f"nodename={NODE}", "state=down", "reason=PSU swap")
        expected, flag = "PSU swap", "DOWN"
    else:
        request.getfixturevalue("running_job")
        _scontrol(cluster, "reboot", "ASAP", NODE)
        expected, flag = "Reboot ASAP", "REBOOT_REQUESTED"
    before = cluster.node()
    assert flag in before.flags and before.reason == expected, before
    shared = cluster.base / "shared-state"
    shared.mkdir(exist_ok=True)
    shared.chmod(0o777)
    try:
        # A failing run of the check (an XID), then a crashing one: neither touches the node.
        with cluster.kernel_log.open("a") as log:
            # (each case a later kernel time: the cursor is past the earlier ones)
            at = 6000.5 if held == "DOWN" else 7000.5
            log.write(klog.xid_line(at, "0000:86:00", 79) + "\n")
        failing = cluster.run_program()
        assert failing.returncode == 0, failing.stderr
        assert f"{NODE} fails, but it is" in failing.stderr and "left as it is" in failing.stderr
        cluster.settings(state=shared / "health-state.json")
        crashing = cluster.run_program()
        assert crashing.returncode == 1 and "left as it is" in crashing.stderr, crashing.stderr
        after = cluster.node()
        assert flag in after.flags and (after.reason, after.reason_time) == (
            before.reason, before.reason_time), (before, after)
        wait_for("both in the log", lambda: sum("left as it is" in x for x in cluster.log_lines())
                 >= 2)
    finally:
        cluster.settings()
        cluster.health("--clear")
        if held == "DOWN":
            _scontrol(cluster, "update", f"nodename={NODE}", "state=resume")
        else:
            _scontrol(cluster, "cancel_reboot", NODE)
            subprocess.run(["scancel", "--user=root"], env=cluster.env, check=False, timeout=30)
            subprocess.run(["scontrol", "update", f"nodename={NODE}", "state=resume"],
                           env=cluster.env, check=False, timeout=30, capture_output=True)
    wait_for("the node to be back", lambda: not cluster.node().drained and "DOWN" not in
             cluster.node().flags)


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



STAND_INS = {
    "segfaults": "#!/bin/bash\necho 'error: about to crash'\nkill -SEGV $$\n",
    "is chatty": "#!/bin/bash\nfor i in $(seq 300); do echo \"error: line $i\"; done\nexit 1\n",
    # 300 error lines, then 24 MiB of output, then exit 0
    "floods": "#!/bin/bash\nfor i in $(seq 300); do echo \"error: line $i\"; done\n"
              "head -c 25165824 /dev/zero | tr '\\0' x\nexit 0\n",
}
RELAYED = 20  # health-check.sh relays at most this many of the check's lines


@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("segfaults", r"check crashed: SIGSEGV \(exit 139\) error: about to crash"),
        ("is chatty", r"check failed \(exit 1\) error: line 300"),
        ("floods", r"check wrote over 16 MiB of output.*"),
    ],
)
def test_a_check_killed_by_a_signal_or_flooding_its_output_drains_before_anything_is_relayed(
    cluster: HealthCluster, how: str, reason: str
) -> None:
    """The drain comes first, then at most RELAYED of the check's lines go to syslog: each line
    is a ``logger`` call, and a slow syslog must not spend slurmd's 60 s before the drain. A
    signal is named (SIGSEGV, not a bare 139); output is held to 16 MiB (a check that floods
    fills no disk) and a check that reached that limit is a failed check, whatever it exited."""
    wait_for("the node to be idle", lambda: not cluster.node().drained)
    stand_in = cluster.base / f"check-that-{how.replace(' ', '-')}"
    stand_in.write_text(STAND_INS[how])
    stand_in.chmod(0o755)
    cluster.settings(workloads=stand_in, deadline=20)
    try:
        done = cluster.run_program()
        assert done.returncode == 1, done.stderr
        said = done.stderr.splitlines()
        drained = [i for i, x in enumerate(said) if re.search(r" (stays )?drained: ", x)]
        relayed = [i for i, x in enumerate(said) if "check: error:" in x]
        assert drained, said
        assert len(relayed) <= RELAYED, len(relayed)
        if how != "floods":
            assert relayed and drained[0] < relayed[0], said
        node = cluster.node()
        assert node.ours and node.reason is not None
        assert re.fullmatch(rf"workloads-health: {reason}; host; run workloads health by hand; "
                            r"since \d{4}-\d\d-\d\dT\d\d:\d\dZ", node.reason), node.reason
    finally:
        cluster.settings()
        wait_for("the failing checks to end", lambda: not running(str(cluster.base / "check-")))
        wait_for("the runs begun before to end", lambda: not running(str(cluster.program)))
    wait_for("the node to resume after a passing run", lambda: not cluster.node().drained)
