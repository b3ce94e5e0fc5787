"""upgrade.yml's SLURM side on the local cluster, without its roles (skipped by tag): fast.

Four inventory hosts (this machine, reached locally) in batches of 1 then 2, each a SLURM node:
the first a stand-in node (no slurmd), drained and resumed; the second the cluster's real node,
running a job that outlives the drain deadline (the planted failure); the third a stand-in beside
it in its batch; the fourth a stand-in the rollout must never reach. scontrol and squeue run on an
inventory host of their own, the controller. The roles themselves, on stand-in containers, are
test_site.py's rolling upgrade.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml

from tests.ansible.playbook import PlaybookRun, run_playbook, site_role_order
from tests.slurm.cluster import local_cluster, node_state, run_a_job_on_localhost

pytestmark = [pytest.mark.timeout(600)]


_node = node_state


def _rollout(tmp_path: Path) -> tuple[PlaybookRun, dict[str, tuple[str, str]]]:
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd, munged)")
    if shutil.which("slurmctld") is None:
        pytest.fail("slurm-wlm missing: scripts/install-test-deps.sh installs it")
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
             "ansible_become": False}
    hosts = {"up-first": local, "up-second": {**local, "upgrade_slurm_node": "localhost"},
             "up-beside": local, "up-last": local}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"slurm-controller": local},
        "children": {"gpu_hosts": {"hosts": hosts}}}}, sort_keys=False))  # the rollout's order
    stand_ins = [name for name in hosts if name != "up-second"]
    with local_cluster(tmp_path / "slurm", TFHOST_SLURM_NODES=" ".join(stand_ins)) as env:
        run_a_job_on_localhost(env, tmp_path, 300)
        variables = tmp_path / "vars.yml"
        variables.write_text(yaml.safe_dump({
            "upgrade_serial": [1, 2], "upgrade_slurm_controller": "slurm-controller",
            "upgrade_slurm_conf": env["SLURM_CONF"], "upgrade_drain_poll": 1,
            "upgrade_drain_timeout": 3,
            # never this machine: the OS's own reboot step is skipped even if it asked for one
            "nvidia_driver_reboot": False}))
        run = run_playbook(inventory, [variables], tmp_path / "play.log", "--skip-tags",
                           ",".join(site_role_order()), playbook="upgrade.yml", vault=None)
        nodes = {name: _node(env, name) for name in [*stand_ins, "localhost"]}
    return run, nodes


@pytest.fixture(scope="module")
def rollout(
        tmp_path_factory: pytest.TempPathFactory) -> tuple[PlaybookRun, dict[str, tuple[str, str]]]:
    return _rollout(tmp_path_factory.mktemp("upgrade"))


def test_the_first_host_is_drained_and_resumed(
        rollout: tuple[PlaybookRun, dict[str, tuple[str, str]]]) -> None:
    run, nodes = rollout
    assert run.recaps["up-first"]["failed"] == 0, run.explain()
    assert run.recaps["up-first"]["changed"] == 2, run.explain()  # the drain, the resume
    assert "DRAIN" not in nodes["up-first"][0] and nodes["up-first"][1] == "", nodes


def test_a_job_past_the_deadline_stops_the_rollout_with_the_node_drained(
        rollout: tuple[PlaybookRun, dict[str, tuple[str, str]]]) -> None:
    run, nodes = rollout
    assert run.returncode != 0
    assert run.recaps["up-second"]["failed"] == 1, run.explain()
    state, reason = nodes["localhost"]
    assert "DRAIN" in state.split("+"), nodes  # DRAINING: the job still runs
    assert reason.startswith("workloads-upgrade: failed at Wait for the nodes jobs to end; host; "
                             "fix it, run upgrade.yml again; since "), reason
    said = " ".join(run.output.split())
    assert "The upgrade of up-second failed at \"Wait for the node's jobs to end\"" in said


def test_the_batch_stops_with_it_and_the_last_host_is_never_reached(
        rollout: tuple[PlaybookRun, dict[str, tuple[str, str]]]) -> None:
    """max_fail_percentage 0: the host beside the failing one stops there, drained; without it
    the batch would count as passed (not every host failed) and the rollout would go on."""
    run, nodes = rollout
    state, reason = nodes["up-beside"]
    assert "DRAIN" in state.split("+"), nodes
    assert reason.startswith("workloads-upgrade: upgrading to "), nodes
    assert "up-last" not in run.recaps, run.explain()
    assert "DRAIN" not in nodes["up-last"][0] and nodes["up-last"][1] == "", nodes
