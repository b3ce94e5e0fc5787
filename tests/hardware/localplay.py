"""Run one task file of a role on this machine (connection local), as ansible-playbook does.

Why: the role steps that decide from the hardware or build an image can run
for real here in seconds, without a target container.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

import yaml

from tests.ansible.playbook import PlaybookRun, run_playbook


def run_role_tasks(tmp_path: Path, name: str, role: str, tasks_from: str,
                   variables: dict[str, object],
                   env: Mapping[str, str] | None = None) -> PlaybookRun:
    """include_role ROLE tasks_from=TASKS_FROM on localhost with the given variables (and
    `env` for this play alone, as run_playbook's)."""
    play = [{"name": f"{role}: {tasks_from} alone", "hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": f"Run {role}'s {tasks_from}",
                        "ansible.builtin.include_role": {"name": role,
                                                         "tasks_from": tasks_from}}]}]
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = tmp_path / f"{name}-inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    extra = tmp_path / f"{name}-vars.yml"
    extra.write_text(yaml.safe_dump(variables))
    return run_playbook(inventory, [extra], tmp_path / f"{name}.log", playbook=str(playbook),
                        vault=None, env=env)
