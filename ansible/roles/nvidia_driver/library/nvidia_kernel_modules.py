#!/usr/bin/python
"""Ansible module: every installed kernel that would boot, and its NVIDIA module, in one run.

Why: a kernel update lands, DKMS did not build for it (no headers, a failed build, an
unsigned module under Secure Boot) and the host reboots into a kernel without the driver.
The role checks every bootable kernel before any reboot it triggers, and on its own under
the `nvidia_kernel_check` tag. Per kernel that is a directory walk, `modinfo`, `dkms
status` and a build log: as separate tasks a dozen module runs per kernel, here one. The
module only gathers; which kernel lacks its module, and why, is decided by the role's
`nvidia_kernel_problems` filter (filter_plugins/nvidia_kernels.py), so the rule has one
home and is tested there. It changes nothing, so it runs in check mode too.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: nvidia_kernel_modules
short_description: List the bootable kernels, each one's NVIDIA module, signature and headers
description:
  - Lists C(<root>/boot/vmlinuz-<version>) (not the rescue image) and, where C(grubby) is
    installed, the kernels of C(grubby --info=ALL); each kernel's C(<root>/lib/modules/<version>).
  - Per kernel, looks for the module file (C(nvidia.ko), compressed too) under the module
    directory's C(updates), C(extra) and C(kernel/nvidia*) trees (DKMS, kmod and Ubuntu's
    prebuilt signed modules), reads its signer with C(modinfo) (or, without it, the kernel's
    signature marker at the end of an uncompressed file), runs C(dkms status -k <version>)
    where dkms is installed, reads the last lines of a DKMS build log, and says whether
    C(/lib/modules/<version>/build) points at an existing directory (the headers).
  - Decides nothing and changes nothing - the role's C(nvidia_kernel_problems) filter decides.
options:
  root:
    description: The file system root the paths are read under (a fake tree in tests).
    type: path
    default: /
  module_name:
    description: The kernel module's name (its file is C(<module_name>.ko[.xz|.zst|.gz])).
    type: str
    default: nvidia
  dkms_module:
    description: >-
      The DKMS module's name, a glob (C(/var/lib/dkms/<dkms_module>)): NVIDIA's packages
      register C(nvidia), some distributions' C(nvidia-open) or C(nvidia-current).
    type: str
    default: nvidia*
  log_lines:
    description: How many last lines of a DKMS build log to return.
    type: int
    default: 15
author: tf-gpu-host
"""

EXAMPLES = r"""
- name: Read every bootable kernel's NVIDIA module
  nvidia_kernel_modules: {}
  register: kernels
"""

RETURN = r"""
kernels:
  description: One entry per bootable kernel, oldest first (version order).
  type: list
  elements: dict
  contains:
    version: {description: The kernel release (uname -r of that kernel)., type: str}
    modules_dir: {description: Whether /lib/modules/<version> exists., type: bool}
    headers: {description: Whether /lib/modules/<version>/build is a directory., type: bool}
    module_file: {description: The module's path (under root); null when none., type: str}
    signer: {description: The module's signer (modinfo); null when unsigned/unknown., type: str}
    sig_key: {description: The module's signing key id (modinfo); null likewise., type: str}
    signed: {description: Whether the module is signed; null when it cannot be told., type: bool}
    dkms_status: {description: What dkms status -k said; null without dkms., type: str}
    build_log: {description: The DKMS build log's last lines; null when none., type: str}
    build_log_path: {description: That log's path (under root)., type: str}
running: {description: The running kernel's release (os.uname)., type: str}
"""

# The kernel appends this to a signed module (include/linux/module_signature.h, MODULE_SIG_STRING).
SIGNATURE_MARKER = b"~Module signature appended~\n"
MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
# Where a module built outside the kernel lands: DKMS (updates/dkms, Debian/Ubuntu; extra,
# RHEL), kmod packages (extra), Ubuntu's prebuilt signed linux-modules-nvidia-*
# (kernel/nvidia-<branch>).
MODULE_TREES = ("updates", "extra", "kernel/nvidia*")
Runner = Callable[[list[str]], "tuple[int, str]"]


def _under(root: str, path: str) -> str:
    """`path` (absolute on the host) read under `root`."""
    return os.path.join(root, path.lstrip("/"))


def _version_key(version: str) -> list[Any]:
    """Sort key: numbers as numbers, so 6.1.0-10 sorts after 6.1.0-9."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", version) if part]


def boot_kernels(root: str, grubby_stdout: str | None) -> list[str]:
    """The kernels that would boot: /boot/vmlinuz-<version> and grubby's entries (not rescue)."""
    versions = {os.path.basename(path)[len("vmlinuz-"):]
                for path in glob.glob(_under(root, "/boot/vmlinuz-*"))}
    for line in (grubby_stdout or "").splitlines():
        match = re.match(r'^kernel="?(?:/boot)?/vmlinuz-([^"\s]+)"?\s*$', line.strip())
        if match:
            versions.add(match.group(1))
    return sorted((v for v in versions if not v.startswith("0-rescue") and "rescue" not in v),
                  key=_version_key)


def headers_installed(root: str, version: str) -> bool:
    """Whether /lib/modules/<version>/build points at an existing directory (a link's
    absolute target is read under root too)."""
    build = _under(root, f"/lib/modules/{version}/build")
    if os.path.islink(build):
        target = os.readlink(build)
        target = _under(root, target) if os.path.isabs(target) else os.path.join(
            os.path.dirname(build), target)
        return os.path.isdir(target)
    return os.path.isdir(build)


def find_module(root: str, version: str, name: str) -> str | None:
    """The module's file under the kernel's out-of-tree module directories; None when none."""
    base = _under(root, f"/lib/modules/{version}")
    for tree in MODULE_TREES:
        for top in sorted(glob.glob(os.path.join(base, tree))):
            for directory, _dirs, files in sorted(os.walk(top)):
                for suffix in MODULE_SUFFIXES:
                    if name + suffix in files:
                        return os.path.join(directory, name + suffix)
    return None


def parse_modinfo(stdout: str) -> dict[str, str]:
    """modinfo's `field: value` lines (a field's continuation lines joined; first value wins)."""
    fields: dict[str, str] = {}
    last = ""
    for line in stdout.splitlines():
        match = re.match(r"^([a-z_]+):\s*(.*)$", line)
        if match:
            last = match.group(1)
            fields.setdefault(last, match.group(2).strip())
        elif last and line.startswith((" ", "\t")) and fields.get(last) is not None:
            fields[last] += line.strip()
    return fields


def marker_signed(path: str) -> bool | None:
    """Whether an uncompressed module ends with the kernel's signature marker; None when
    the file is compressed or unreadable (the marker is inside the compressed data)."""
    if not path.endswith(".ko"):
        return None
    try:
        with open(path, "rb") as module:
            module.seek(0, os.SEEK_END)
            module.seek(max(0, module.tell() - len(SIGNATURE_MARKER)))
            return module.read() == SIGNATURE_MARKER
    except OSError:
        return None


def build_log(root: str, dkms_module: str, version: str,
              lines: int) -> tuple[str | None, str | None]:
    """The last lines of DKMS's build log for this kernel: /var/lib/dkms/<module>/<ver>/<kver>/
    <arch>/log/make.log (dkms 3), else the module's build/make.log (dkms 2 leaves a failed
    build's log there); the newest by modification time."""
    base = _under(root, f"/var/lib/dkms/{dkms_module}")
    logs = glob.glob(os.path.join(base, "*", glob.escape(version), "*", "log", "make.log"))
    if not logs:
        logs = [log for log in glob.glob(os.path.join(base, "*", "build", "make.log"))
                if _log_mentions(log, version)]
    if not logs:
        return None, None
    newest = max(logs, key=os.path.getmtime)
    try:
        with open(newest, encoding="utf-8", errors="replace") as log:
            tail = log.read().splitlines()[-lines:]
    except OSError:
        return None, None
    return "\n".join(tail), newest


def _log_mentions(path: str, version: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            return version in log.read(4096)
    except OSError:
        return False


def kernel_entry(root: str, version: str, options: dict[str, Any],
                 modinfo: Runner | None, dkms: Runner | None) -> dict[str, Any]:
    """Everything about one kernel's NVIDIA module."""
    module_file = find_module(root, version, options["module_name"])
    fields: dict[str, str] = {}
    if module_file and modinfo is not None:
        rc, stdout = modinfo([module_file])
        fields = parse_modinfo(stdout) if rc == 0 else {}
    signer = fields.get("signer") or None
    sig_key = fields.get("sig_key") or None
    signed: bool | None
    if signer or sig_key:
        signed = True
    elif fields:
        signed = marker_signed(module_file) if module_file else None
        signed = False if signed is None else signed
    else:
        signed = marker_signed(module_file) if module_file else None
    dkms_status = None
    if dkms is not None:
        rc, stdout = dkms(["status", "-k", version])
        dkms_status = stdout.strip() if rc == 0 else None
    log, log_path = build_log(root, options["dkms_module"], version, options["log_lines"])
    return {
        "version": version,
        "modules_dir": os.path.isdir(_under(root, f"/lib/modules/{version}")),
        "headers": headers_installed(root, version),
        "module_file": "/" + os.path.relpath(module_file, root) if module_file else None,
        "signer": signer,
        "sig_key": sig_key,
        "signed": signed,
        "dkms_status": dkms_status,
        "build_log": log,
        "build_log_path": "/" + os.path.relpath(log_path, root) if log_path else None,
    }


def gather(root: str, options: dict[str, Any], grubby_stdout: str | None,
           modinfo: Runner | None, dkms: Runner | None) -> dict[str, Any]:
    """The module's result."""
    return {
        "kernels": [kernel_entry(root, version, options, modinfo, dkms)
                    for version in boot_kernels(root, grubby_stdout)],
        "running": os.uname().release,
    }


def main() -> None:
    module = AnsibleModule(argument_spec={
        "root": {"type": "path", "default": "/"},
        "module_name": {"type": "str", "default": "nvidia"},
        "dkms_module": {"type": "str", "default": "nvidia*"},
        "log_lines": {"type": "int", "default": 15},
    }, supports_check_mode=True)
    root = module.params["root"]
    on_host = os.path.realpath(root) == "/"

    def runner(binary: str | None) -> Runner | None:
        if binary is None:
            return None

        def run(args: list[str]) -> tuple[int, str]:
            rc, stdout, _err = module.run_command([binary, *args], environ_update={"LC_ALL": "C"})
            return rc, stdout
        return run

    # The tools read the host's own files: under another root only the files are read.
    grubby = module.get_bin_path("grubby") if on_host else None
    grubby_stdout = module.run_command([grubby, "--info=ALL"])[1] if grubby else None
    modinfo = runner(module.get_bin_path("modinfo", opt_dirs=["/sbin", "/usr/sbin"])
                     if on_host else None)
    dkms = runner(module.get_bin_path("dkms", opt_dirs=["/usr/sbin"]) if on_host else None)
    module.exit_json(changed=False, **gather(root, module.params, grubby_stdout, modinfo, dkms))


if __name__ == "__main__":
    main()
