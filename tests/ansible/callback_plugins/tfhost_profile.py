"""Ansible callback: one JSON line per task and host, for tests/ansible/bench.py.

Why our own and not only ansible.posix.profile_tasks: profile_tasks prints text sums per
task across hosts and says nothing of how many times the host was reached. This one writes,
for every task on every host, the wall time from the runner's start to its result, the
status, the action, and `host_runs`: how many module executions the host paid for (one per
task, one per loop item that was not skipped; none for controller-side actions such as
set_fact, assert or include_tasks, nor for anything skipped or delegated to localhost).

Enabled only by the benchmark: ANSIBLE_CALLBACKS_ENABLED=tfhost_profile and
TFHOST_PROFILE_PATH=<file.jsonl>.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: tfhost_profile
    type: aggregate
    short_description: per-task, per-host wall time and module executions as JSON lines
    description:
      - Writes one JSON object a line to the file named by TFHOST_PROFILE_PATH.
    requirements:
      - enable in callbacks_enabled
"""

# Actions that Ansible runs on the controller only: no connection to the host.
CONTROLLER_ACTIONS = frozenset({
    "set_fact", "include_tasks", "include_role", "import_tasks", "import_role",
    "include_vars", "assert", "debug", "fail", "meta", "validate_argument_spec",
    "add_host", "group_by", "set_stats", "pause", "import_playbook",
})


def runs_on_controller(action: str, delegate_to: object) -> bool:
    """True when the task never reaches the managed host (controller action or localhost)."""
    short = action.rsplit(".", 1)[-1]
    builtin = action == short or action.startswith(("ansible.builtin.", "ansible.legacy."))
    return (builtin and short in CONTROLLER_ACTIONS) or delegate_to in ("localhost", "127.0.0.1")


class CallbackModule(CallbackBase):
    """Per task and host: seconds, status, action, module executions on the host."""

    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "tfhost_profile"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._path = os.environ.get("TFHOST_PROFILE_PATH", "")
        self._started: dict[tuple[str, str], float] = {}
        self._items: dict[tuple[str, str], int] = {}
        self._order = 0

    def _key(self, host: Any, task: Any) -> tuple[str, str]:
        return host.get_name(), task._uuid

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        self._started[self._key(host, task)] = time.monotonic()
        self._items[self._key(host, task)] = 0

    def _item_ran(self, result: Any) -> None:
        key = self._key(result._host, result._task)
        self._items[key] = self._items.get(key, 0) + 1

    def v2_runner_item_on_ok(self, result: Any) -> None:
        self._item_ran(result)

    def v2_runner_item_on_failed(self, result: Any) -> None:
        self._item_ran(result)

    def _write(self, result: Any, status: str) -> None:
        if not self._path:
            return
        task = result._task
        key = self._key(result._host, task)
        started = self._started.pop(key, time.monotonic())
        items = self._items.pop(key, 0)
        action = str(task.action)
        looped = task.loop is not None or bool(getattr(task, "loop_with", None))
        on_host = status != "skipped" and not runs_on_controller(action, task.delegate_to)
        host_runs = (items if looped else 1) if on_host else 0
        role = task._role.get_name() if task._role is not None else ""
        self._order += 1
        record = {
            "order": self._order, "host": key[0], "role": role, "task": task.get_name(),
            "action": action, "status": status, "seconds": round(time.monotonic() - started, 4),
            "host_runs": host_runs,
        }
        with open(self._path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record) + "\n")

    def v2_runner_on_ok(self, result: Any) -> None:
        self._write(result, "changed" if result.is_changed() else "ok")

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._write(result, "ignored" if ignore_errors else "failed")

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._write(result, "skipped")

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._write(result, "unreachable")
