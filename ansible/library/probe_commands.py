#!/usr/bin/python
"""Ansible module: run several read-only commands in one module run, each rc and output returned."""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: probe_commands
short_description: Several read-only commands in one module run, each answer returned
description:
  - Runs each command (an argv, no shell) in turn and returns, by its name, whether its program
    was found, its C(rc), C(stdout) and C(stderr) (and their lines), as C(ansible.builtin.command)
    with C(failed_when=false) would register them. A program that is not there is not run
    (C(found) false, C(rc) null), where the command module would fail.
  - For the questions a role asks the host (a version, a list of GPUs, Docker's runtimes), one
    module run instead of one per command. The commands must change nothing - the module is
    never C(changed) and runs in check mode - and the caller judges each answer with its own
    assert or fail task, so a probe that fails stops the play where the command did.
options:
  commands:
    description: The commands, each C(name) (the key of its answer) and C(argv).
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Ask nvidia-ctk and Docker
  probe_commands:
    commands:
      - {name: ctk, argv: [nvidia-ctk, --version]}
      - {name: runtimes, argv: [docker, info, --format, "{{ '{{' }} json .Runtimes {{ '}}' }}"]}
  register: probe
"""

RETURN = r"""
answers:
  description: >-
    Name to C(cmd) (the argv, joined), C(found), C(rc) (null where not found), C(stdout),
    C(stderr), C(stdout_lines), C(stderr_lines) (stdout and stderr without their last
    newline, as the command module returns them).
  returned: always
  type: dict
"""


def _program(module: AnsibleModule, name: str) -> str | None:
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    found = module.get_bin_path(name)
    return str(found) if found else None


def probe(module: AnsibleModule, argv: list[str]) -> dict[str, Any]:
    command = " ".join(argv)
    program = _program(module, argv[0])
    if program is None:
        return {"cmd": command, "found": False, "rc": None, "stdout": "", "stderr": "",
                "stdout_lines": [], "stderr_lines": []}
    rc, stdout, stderr = module.run_command([program, *argv[1:]])
    stdout, stderr = stdout.rstrip("\r\n"), stderr.rstrip("\r\n")
    return {"cmd": command, "found": True, "rc": rc, "stdout": stdout, "stderr": stderr,
            "stdout_lines": stdout.splitlines(), "stderr_lines": stderr.splitlines()}


def main() -> None:
    module = AnsibleModule(argument_spec={
        "commands": {"type": "list", "elements": "dict", "required": True,
                     "options": {"name": {"type": "str", "required": True},
                                 "argv": {"type": "list", "elements": "str", "required": True}}},
    }, supports_check_mode=True)
    commands = module.params["commands"]
    names = [command["name"] for command in commands]
    if len(set(names)) != len(names) or any(not command["argv"] for command in commands):
        module.fail_json(msg="each command needs its own name and a non-empty argv")
    module.exit_json(changed=False, answers={command["name"]: probe(module, command["argv"])
                                             for command in commands})


if __name__ == "__main__":
    main()
