"""Run ansible/hypervisor.yml and read its results as JSON.

Why JSON (the ansible.posix.json callback) and not the screen output: the
tests assert on what a task rendered (check mode's diff holds each template's
new content) and on a failure's exact message, which the JSON keeps intact.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Play:
    """One ansible-playbook run: exit code, parsed results, raw output."""

    returncode: int
    results: dict[str, Any]
    output: str

    def tasks(self, host: str) -> list[tuple[str, dict[str, Any]]]:
        """(task name without the role prefix, result) in the order the tasks ran on `host`."""
        return [(task["task"]["name"].split(" : ", 1)[-1], task["hosts"][host])
                for play in self.results.get("plays", []) for task in play["tasks"]
                if host in task["hosts"]]

    def result(self, host: str, name: str) -> dict[str, Any]:
        matches = [result for task, result in self.tasks(host) if task == name]
        ran = [task for task, _ in self.tasks(host)]
        assert matches, f"task {name!r} did not run on {host}; ran: {ran}"
        return matches[-1]

    def rendered(self, host: str, name: str, dest: str | None = None) -> str:
        """The content a template/blockinfile task wrote (or would write, in check mode)."""
        result = self.result(host, name)
        items = result.get("results", [result])
        for item in items:
            if dest is None or item.get("item", {}).get("dest") == dest:
                diffs = item.get("diff") or []
                diffs = diffs if isinstance(diffs, list) else [diffs]
                return "".join(str(diff.get("after", "")) for diff in diffs)
        raise AssertionError(f"{name!r} has no result for {dest}")

    def failure(self, host: str) -> tuple[str, str]:
        """(task name, message) of the task that failed on host."""
        for task, result in self.tasks(host):
            if result.get("failed"):
                return task, str(result.get("msg", ""))
        raise AssertionError(f"nothing failed on {host}:\n{self.output[-4000:]}")


def localhost_inventory(path: Path, group: str = "gpu_hypervisors") -> Path:
    """This machine as the target, without sudo (the tests run as root)."""
    host = {"ansible_connection": "local", "ansible_python_interpreter": "/usr/bin/python3",
            "ansible_become": False}
    path.write_text(yaml.safe_dump({"all": {"children": {group: {"hosts": {"localhost": host}}}}}))
    return path


def run_hypervisor_play(inventory: Path, variables: dict[str, Any], workdir: Path,
                        *options: str, timeout: float = 600) -> Play:
    """ansible-playbook hypervisor.yml with `variables` as an extra-vars file."""
    extra = workdir / "hypervisor-vars.yml"
    extra.write_text(yaml.safe_dump(variables))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
        "ANSIBLE_LOG_PATH": str(workdir / "ansible.log"),
        "ANSIBLE_NOCOLOR": "1",
        "PATH": f"{BIN}:{os.environ.get('PATH', '')}",
    }
    args = [str(BIN / "ansible-playbook"), "-i", str(inventory), "hypervisor.yml",
            "-e", f"@{extra}", *options]
    done = subprocess.run(args, cwd=ANSIBLE_DIR, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    try:
        results = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        results = {}
    return Play(done.returncode, results, done.stdout + done.stderr)
