"""upgrade.yml's SLURM side on the local cluster, the cases next to test_upgrade_play.py's rollout.

Each play runs against hosts on this machine (reached locally) with its roles skipped by tag, as
there: a dry run (--check) beside a node with a running job; a host that stops answering after its
drain, in a batch of two; a host whose SLURM node has another name than its inventory name; a
host running slurmd without scontrol.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.playbook import PlaybookRun, run_playbook, site_role_order
from tests.slurm.cluster import local_cluster, node_state, run_a_job_on_localhost

pytestmark = [pytest.mark.timeout(600)]

STAND_INS = ["ck-ok", "un-a", "un-b", "un-c"]
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
         "ansible_become": False}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], Path]]:
    if os.geteuid() != 0:
        pytest.skip("the local SLURM cluster needs root (slurmd, munged)")
    if shutil.which("slurmctld") is None:
        pytest.fail("slurm-wlm missing: scripts/install-test-deps.sh installs it")
    root = tmp_path_factory.mktemp("upgrade-edges")
    with local_cluster(root / "slurm", TFHOST_SLURM_NODES=" ".join(STAND_INS)) as env:
        run_a_job_on_localhost(env, root, 600)
        yield env, root


def _play(env: dict[str, str], work: Path, hosts: dict[str, dict[str, Any]], *options: str,
          search_path: str | None = None, **settings: Any) -> PlaybookRun:
    work.mkdir()
    inventory = work / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"slurm-controller": LOCAL},
        "children": {"gpu_hosts": {"hosts": hosts}}}}, sort_keys=False))
    variables = work / "vars.yml"
    variables.write_text(yaml.safe_dump({
        "upgrade_slurm_controller": "slurm-controller", "upgrade_slurm_conf": env["SLURM_CONF"],
        "upgrade_drain_poll": 1, "upgrade_drain_timeout": 3, "nvidia_driver_reboot": False,
        **settings}))
    return run_playbook(inventory, [variables], work / "play.log", "--skip-tags",
                        ",".join(site_role_order()), *options, playbook="upgrade.yml",
                        vault=None, timeout=300, search_path=search_path)


def test_check_mode_neither_drains_nor_waits_for_jobs(
        cluster: tuple[dict[str, str], Path]) -> None:
    """--check changes nothing: no drain, so no wait for the jobs a drain would let end (the
    wait would run its whole deadline, then fail the host and stop the dry run)."""
    env, root = cluster
    run = _play(env, root / "check", {"ck-job": {**LOCAL, "upgrade_slurm_node": "localhost"},
                                      "ck-ok": LOCAL}, "--check")
    assert "DRAIN" not in node_state(env, "localhost")[0].split("+")
    assert "DRAIN" not in node_state(env, "ck-ok")[0].split("+")
    assert run.returncode == 0, run.explain()
    assert run.recaps["ck-job"]["failed"] == 0 and "ck-ok" in run.recaps, run.explain()


def test_a_host_unreachable_after_its_drain_stops_the_rollout(
        cluster: tuple[dict[str, str], Path]) -> None:
    """A host that stops answering mid-upgrade (a hung reboot, a dead link) is no failed host
    to max_fail_percentage: in a batch of two whose other host passes, the rollout went on."""
    env, root = cluster
    # un-a answers until its node is drained, then is an SSH host on a closed port.
    shown = f"SLURM_CONF={env['SLURM_CONF']} scontrol show node un-a"
    gone = {**LOCAL, "ansible_connection": (
        "{{ 'ssh' if 'DRAIN' in lookup('ansible.builtin.pipe', '" + shown + "') else 'local' }}"),
        "ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_user": "nobody"}
    run = _play(env, root / "unreachable", {"un-a": gone, "un-b": LOCAL, "un-c": LOCAL},
                upgrade_serial=2)
    assert run.recaps["un-a"]["unreachable"] == 1, run.explain()
    assert run.returncode != 0, run.explain()
    # The next batch stops at its first task (after the facts): nothing changed on un-c.
    assert run.recaps["un-c"]["changed"] == 0 and run.recaps["un-c"]["failed"] == 1, run.explain()
    assert "un-a did not finish its upgrade (unreachable)" in " ".join(run.output.split())
    assert "DRAIN" not in node_state(env, "un-c")[0].split("+")
    state, reason = node_state(env, "un-a")
    assert "DRAIN" in state.split("+") and reason.startswith("workloads-upgrade: "), (state, reason)


def test_a_host_slurm_does_not_know_by_that_name_stops_before_any_change(
        cluster: tuple[dict[str, str], Path]) -> None:
    """An inventory name that is no SLURM node name (an address, an FQDN where the nodes are
    short names, an alias) in a fleet with a controller: upgraded without a drain, its jobs
    were killed by the driver switch and the reboot."""
    env, root = cluster
    run = _play(env, root / "unknown", {"10.20.30.40": LOCAL})
    assert run.returncode != 0, run.explain()
    said = " ".join(run.output.split())
    assert "SLURM knows no node 10" in said and "upgrade_slurm_node" in said, run.explain()
    # The explicit word for a host of the fleet that is no SLURM node (a login host):
    run = _play(env, root / "login", {"10.20.30.40": {**LOCAL, "upgrade_slurm_node": ""}})
    assert run.returncode == 0, run.explain()
    assert "no SLURM node" in " ".join(run.output.split()), run.explain()


def test_a_host_running_slurmd_without_scontrol_stops_before_any_change(
        cluster: tuple[dict[str, str], Path], tmp_path: Path) -> None:
    """Debian's slurmd does not bring scontrol (slurm-client): with no controller named, such a
    compute node was taken for no SLURM node and upgraded, its jobs running, without a drain."""
    env, root = cluster
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ["sh", "slurmd"]:
        found = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
        assert found is not None, tool
        (tools / tool).symlink_to(found)
    run = _play(env, root / "slurmd", {"compute-1": LOCAL}, search_path=str(tools),
                upgrade_slurm_controller="")
    assert run.returncode != 0, run.explain()
    said = " ".join(run.output.split())
    assert "runs slurmd" in said and "upgrade_slurm_controller" in said, run.explain()
