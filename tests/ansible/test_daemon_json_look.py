"""The docker and nvidia_container_toolkit roles read daemon.json with one file_state look.

What the look replaced (a stat, then a slurp) decided three things the roles still decide
from it, on a real stand-in: a daemon.json that is not a JSON object stops the play with
the role's message; a symlinked daemon.json is read through the link (file_state does not
follow it; the role's slurp does), so the site's keys are kept in the merge; a regular one
already holding every key is left alone (ok, no write).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.ansible.playbook import run_playbook, write_inventory
from tests.ansible.target import start_target, target_image

DOCKER_UNIT = "[Service]\nType=oneshot\nExecStart=/bin/true\nRemainAfterExit=yes\n"


def _play(role: str) -> list[dict[str, object]]:
    options = ({"docker_daemon_options": {"log-driver": "journald"}} if role == "docker"
               else {"nvidia_container_toolkit_default_runtime": False})
    return [{"name": f"{role}'s daemon.json", "hosts": "gpu_hosts", "gather_facts": False,
             "become": True,
             "tasks": [{"name": "Merge", "ansible.builtin.include_role": {
                 "name": role, "tasks_from": "daemon-json"}, "vars": options}]}]


@pytest.mark.docker
@pytest.mark.parametrize("role", ["docker", "nvidia_container_toolkit"])
def test_daemon_json_cases(docker_host: str, tmp_path: Path, role: str) -> None:
    host = start_target(target_image(), f"tfhost-daemon-json-{role[:6]}-{os.getpid()}")
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump(_play(role), sort_keys=False))
    inventory = write_inventory(tmp_path / "inventory.yml", host.name)

    def run(name: str) -> tuple[int, str]:
        result = run_playbook(inventory, [], tmp_path / f"{name}.log", playbook=str(play),
                              vault=None, timeout=300)
        return result.returncode, result.output

    try:
        # The roles' restart handlers restart docker.service: a stand-in of it (no engine here).
        host.exec("tee", "/etc/systemd/system/docker.service", stdin=DOCKER_UNIT)
        host.exec("systemctl", "daemon-reload")
        host.exec("mkdir", "-p", "/etc/docker", "/etc/site")
        host.exec("tee", "/etc/docker/daemon.json", stdin="[1, 2]\n")
        code, output = run("array")
        assert code != 0
        assert "/etc/docker/daemon.json" in output and "is not a JSON object" in output, output

        # The site keeps its daemon.json elsewhere, linked: its key survives the merge.
        host.exec("rm", "/etc/docker/daemon.json")
        host.exec("tee", "/etc/site/daemon.json", stdin=json.dumps({"site-key": "kept"}) + "\n")
        host.exec("ln", "-s", "/etc/site/daemon.json", "/etc/docker/daemon.json")
        code, output = run("link")
        assert code == 0, output
        merged = json.loads(host.read("/etc/docker/daemon.json"))
        assert merged["site-key"] == "kept"
        assert ("log-driver" in merged) if role == "docker" else ("runtimes" in merged)

        # Now a regular root 0644 file holding every key: nothing written.
        host.exec("rm", "/etc/docker/daemon.json")
        host.exec("tee", "/etc/docker/daemon.json", stdin=json.dumps(merged, indent=2) + "\n")
        host.exec("chmod", "0644", "/etc/docker/daemon.json")
        code, output = run("in-place")
        assert code == 0, output
        assert "changed=0" in output, output
    finally:
        host.remove()
