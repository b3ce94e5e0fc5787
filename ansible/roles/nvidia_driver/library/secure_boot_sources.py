#!/usr/bin/python
"""Ansible module: read everything that can say whether Secure Boot is on, in one module run.

Why one module: the role asks three sources (the firmware's EFI variables, `mokutil
--sb-state`, the EFI firmware directory) before it touches anything, on every converge.
As separate `slurp`, `stat` and `command` tasks that was four or five module runs, each
paying the host's Python start and Ansible's module code (about 0.4 s a run on a small
host, docs/benchmarks.md). The module only gathers the raw answers; which one decides,
and how an EFI variable's bytes are read, stays in filter_plugins/secure_boot.py
(`secure_boot_decision`), so the rule has one home and is tested there.
"""

from __future__ import annotations

import base64
import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: secure_boot_sources
short_description: Read every source of the Secure Boot state (EFI variables, mokutil, EFI dir)
description:
  - Reads C(<efi_path>/efivars/SecureBoot-<guid>) and C(SetupMode-<guid>) (efivarfs - 4 attribute
    bytes, then the data) and returns each file's bytes base64-encoded, as C(ansible.builtin.slurp)
    would, or null when a file is missing or unreadable.
  - Runs C(mokutil --sb-state) when mokutil is on the PATH (it only reads the same variable) and
    returns what it printed; mokutil's own exit status does not matter (it exits non-zero on a
    host without EFI variables, which is an answer too - none).
  - Says whether C(efi_path) exists at all - without it the host booted through a legacy BIOS,
    which has no Secure Boot.
  - Decides nothing - the role's C(secure_boot_decision) filter does - and changes nothing, so it
    runs in check mode too.
options:
  efi_path:
    description: The EFI firmware directory (a fake tree in tests).
    type: path
    default: /sys/firmware/efi
  guid:
    description: The UEFI global-variable GUID that SecureBoot and SetupMode belong to.
    type: str
    default: 8be4df61-93ca-11d2-aa0d-00e098032b8c
author: tf-gpu-host
"""

EXAMPLES = r"""
- name: Read the Secure Boot state's sources
  secure_boot_sources:
    efi_path: /sys/firmware/efi
  register: sources
"""

RETURN = r"""
secure_boot:
  description: The SecureBoot variable's efivarfs file, base64; null when it cannot be read.
  type: str
setup_mode:
  description: The SetupMode variable's efivarfs file, base64; null when it cannot be read.
  type: str
mokutil_installed:
  description: Whether mokutil is on the PATH.
  type: bool
mokutil_stdout:
  description: What C(mokutil --sb-state) printed; null when mokutil is not installed.
  type: str
efi_firmware:
  description: Whether C(efi_path) exists (false - a legacy BIOS boot).
  type: bool
"""


def read_variable(efi_path: str, name: str, guid: str) -> str | None:
    """An efivarfs file's bytes, base64 (slurp's encoding); None when it cannot be read."""
    try:
        with open(os.path.join(efi_path, "efivars", f"{name}-{guid}"), "rb") as variable:
            return base64.b64encode(variable.read()).decode("ascii")
    except OSError:
        return None


def sources(efi_path: str, guid: str, mokutil_installed: bool,
            mokutil_stdout: str | None) -> dict[str, Any]:
    """The module's result: the two variables' files, mokutil's answer, the directory."""
    return {
        "secure_boot": read_variable(efi_path, "SecureBoot", guid),
        "setup_mode": read_variable(efi_path, "SetupMode", guid),
        "mokutil_installed": mokutil_installed,
        "mokutil_stdout": mokutil_stdout,
        "efi_firmware": os.path.isdir(efi_path),
    }


def main() -> None:
    module = AnsibleModule(argument_spec={
        "efi_path": {"type": "path", "default": "/sys/firmware/efi"},
        "guid": {"type": "str", "default": "8be4df61-93ca-11d2-aa0d-00e098032b8c"},
    }, supports_check_mode=True)
    mokutil = module.get_bin_path("mokutil")
    mokutil_stdout: str | None = None
    if mokutil:
        _rc, mokutil_stdout, _err = module.run_command([mokutil, "--sb-state"],
                                                       environ_update={"LC_ALL": "C"})
    module.exit_json(changed=False, **sources(module.params["efi_path"], module.params["guid"],
                                              mokutil is not None, mokutil_stdout))


if __name__ == "__main__":
    main()
