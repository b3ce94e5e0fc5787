"""Filters: which bootable kernel lacks its NVIDIA module and why; which headers each kernel needs.

Why here and not in the tasks: the nvidia_kernel_modules module gathers the facts of every
bootable kernel; the rule that reads them (a kernel without headers cannot get a DKMS build,
a failed build says why in its log, Secure Boot refuses an unsigned module) and the package
names (each distribution's headers per kernel, and the meta-package of the running kernel's
flavour, which makes the next kernel update bring its headers) are decided in one place and
tested with families of generated trees (tests/ansible/test_nvidia_kernel_check.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# Ubuntu's GA kernel series per LTS release: a generic kernel of another series is the
# hardware-enablement (HWE) kernel, whose meta-packages carry the release
# (linux-generic-hwe-22.04 -> linux-headers-generic-hwe-22.04). Ubuntu's kernel lifecycle
# page (ubuntu.com/kernel/lifecycle) lists these.
UBUNTU_GA_SERIES = {"20.04": "5.4", "22.04": "5.15", "24.04": "6.8"}
# A Debian or Ubuntu kernel release: <upstream>-<ABI>-<flavour> (6.1.0-28-cloud-amd64,
# 6.8.0-45-generic, 6.8.0-1015-aws).
DEB_RELEASE = re.compile(r"^(\d+)\.(\d+)\.\d+-\d+-([a-z][a-z0-9-]*)$")


def nvidia_kernel_problems(kernels: Iterable[Mapping[str, Any]],
                           secure_boot: bool) -> list[dict[str, Any]]:
    """Each kernel that would boot without a usable NVIDIA module, with a one-line cause.

    `code` is what the role acts on: `no_headers` (install them, rebuild), `build_failed`
    and `not_built` (rebuild once; stop if it stays), `unsigned` (Secure Boot would refuse
    the module), `no_modules` (the kernel's own modules are missing). A signature that
    cannot be read counts as unsigned under Secure Boot: the check fails closed.
    """
    problems = []
    for kernel in kernels:
        version = str(kernel["version"])
        problem = _problem(kernel, bool(secure_boot))
        if problem:
            code, cause = problem
            problems.append({"kernel": version, "code": code, "cause": cause,
                             "log": kernel.get("build_log")})
    return problems


def _problem(kernel: Mapping[str, Any], secure_boot: bool) -> tuple[str, str] | None:
    version = kernel["version"]
    if not kernel.get("modules_dir"):
        return ("no_modules", f"/lib/modules/{version} is missing: the kernel's modules package "
                "is not installed (reinstall that kernel's image package, or remove the kernel)")
    if not kernel.get("module_file"):
        if not kernel.get("headers"):
            return ("no_headers", f"no headers for {version} (/lib/modules/{version}/build is "
                    "missing or dangling): DKMS cannot build the NVIDIA module")
        if kernel.get("build_log"):
            last = _last_error(str(kernel["build_log"]))
            return ("build_failed", f"the DKMS build of the NVIDIA module failed for {version} "
                    f"({kernel.get('build_log_path')}: {last})")
        status = (kernel.get("dkms_status") or "").strip()
        return ("not_built", f"the NVIDIA module is not built for {version} although its headers "
                f"are installed (dkms status: {status or 'nothing for this kernel'})")
    if secure_boot and kernel.get("signed") is not True:
        told = "unsigned" if kernel.get("signed") is False else "of unknown signature"
        return ("unsigned", f"{kernel['module_file']} for {version} is {told} and Secure Boot is "
                "on: the kernel would refuse it (enrol the DKMS key with mokutil, or use signed "
                "modules)")
    return None


def _last_error(log: str) -> str:
    """The log's last line that says `error` (else its last non-empty line): a one-line cause."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["empty log"])[-1]


def nvidia_kernel_headers(versions: Iterable[str], os_family: str, prefix: str = "") -> list[str]:
    """The package holding each kernel's headers: linux-headers-<ver> (Debian, Ubuntu),
    kernel-devel-<ver> (RHEL; a kernel release there ends in .<arch>, as does the package's).
    With `prefix` (Ubuntu's signed prebuilt modules, linux-modules-nvidia-<branch>-<variant>-):
    that prefix and the kernel - the module comes built and signed, no headers needed."""
    prefix = prefix or ("kernel-devel-" if os_family == "RedHat" else "linux-headers-")
    return [prefix + str(version) for version in versions]


def nvidia_headers_meta(kernel: str, distribution: str, release: str,
                        installed: Iterable[str] = ()) -> list[str]:
    """The headers meta-package of the running kernel's flavour: the next kernel brings its headers.

    Debian and Ubuntu: the flavour is the release's suffix (6.1.0-28-amd64 -> amd64,
    6.1.0-28-cloud-amd64 -> cloud-amd64, 6.8.0-45-generic -> generic, 6.8.0-1015-aws -> aws).
    An installed kernel meta-package of that flavour names the series the host follows
    (linux-image-amd64, linux-generic-hwe-22.04, linux-image-oem-24.04): its headers twin is
    the answer. Without one, on Ubuntu a generic kernel of another series than the release's
    GA kernel is the HWE kernel (linux-headers-generic-hwe-<release>); otherwise
    linux-headers-<flavour>. RHEL: none - kernel-devel is an install-only package, and once
    a kernel-devel-<version> is installed each kernel update brings its own.
    """
    if distribution not in ("Debian", "Ubuntu"):
        return []
    match = DEB_RELEASE.match(kernel)
    if not match:
        return []
    series, flavour = f"{match.group(1)}.{match.group(2)}", match.group(3)
    # (linux-generic-hwe-22.04-edge: Ubuntu's HWE edge kernel, the release then -edge)
    pattern = re.compile(
        rf"^linux-(?:image-)?({re.escape(flavour)}(?:-[a-z]+)*(?:-\d+\.\d+(?:-edge)?)?)$")
    # Not the debug-symbol packages (linux-image-amd64-dbg, -dbgsym): no headers twin.
    followed = sorted({m.group(1) for m in map(pattern.match, installed)
                       if m and not re.search(r"-dbg(sym)?$", m.group(1))})
    if followed:
        return [f"linux-headers-{name}" for name in followed]
    hwe = (distribution == "Ubuntu" and flavour == "generic" and release in UBUNTU_GA_SERIES
           and series != UBUNTU_GA_SERIES[release])
    return [f"linux-headers-generic-hwe-{release}" if hwe else f"linux-headers-{flavour}"]


class FilterModule:
    """Ansible's entry point."""

    def filters(self) -> dict[str, Any]:
        return {"nvidia_kernel_problems": nvidia_kernel_problems,
                "nvidia_kernel_headers": nvidia_kernel_headers,
                "nvidia_headers_meta": nvidia_headers_meta}
