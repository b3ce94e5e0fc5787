"""nvidia_kernel_modules and the nvidia_kernels filters: no kernel boots without its module.

Generated families of fake /boot + /lib/modules trees (Hypothesis, in a temporary
directory given to the module as `root`): each kernel is drawn with or without its
modules directory, headers (a real directory, a link to one, a dangling link - Debian's
/lib/modules/<ver>/build -> /usr/src/linux-headers-<ver>), a module (DKMS's
updates/dkms, RHEL's extra, Ubuntu's prebuilt kernel/nvidia-<branch>; signed with the
kernel's own marker, include/linux/module_signature.h's MODULE_SIG_STRING, or not) and a
DKMS build log (dkms 3's /var/lib/dkms/nvidia/<ver>/<kver>/<arch>/log/make.log). The test
derives what must be reported from the drawing, and holds the module and the filter to it.
"""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_library_module, load_plugin
from tests.ansible.playbook import ANSIBLE_DIR, run_local_play

module = load_library_module("nvidia_kernel_modules.py", "nvidia_driver")
filters = load_plugin("nvidia_kernels.py", "nvidia_driver")

GUID = yaml.safe_load((ANSIBLE_DIR / "roles/nvidia_driver/vars/secureboot.yml").read_text())[
    "__nvidia_driver_efi_global_guid"]
MARKER = b"~Module signature appended~\n"
OPTIONS = {"module_name": "nvidia", "dkms_module": "nvidia", "log_lines": 15}

KERNEL = st.fixed_dictionaries({
    "modules_dir": st.booleans(),
    "headers": st.sampled_from(["none", "dir", "link", "dangling", "relative"]),
    "module": st.sampled_from(["none", "updates/dkms", "extra", "kernel/nvidia-580srv", "updates"]),
    "suffix": st.sampled_from([".ko", ".ko.zst", ".ko.xz"]),
    "signed": st.booleans(),
    "log": st.sampled_from(["none", "error", "ok"]),
})
VERSIONS = st.sampled_from([
    "6.1.0-9-amd64", "6.1.0-10-amd64", "6.1.0-28-cloud-amd64", "6.8.0-45-generic", "6.8.0-1015-aws",
    "5.15.0-122-generic", "5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.14.1.el9_5.x86_64"])


def _plant(root: Path, version: str, spec: dict[str, Any]) -> None:
    """One kernel's files, as the distributions' packages lay them out."""
    (root / "boot").mkdir(exist_ok=True)
    (root / "boot" / f"vmlinuz-{version}").write_bytes(b"kernel")
    if not spec["modules_dir"]:
        return
    moddir = root / "lib" / "modules" / version
    moddir.mkdir(parents=True)
    src = root / "usr" / "src" / f"linux-headers-{version}"
    if spec["headers"] == "dir":
        (moddir / "build").mkdir()
    elif spec["headers"] in ("link", "dangling"):
        if spec["headers"] == "link":
            src.mkdir(parents=True)
        (moddir / "build").symlink_to(f"/usr/src/linux-headers-{version}")
    elif spec["headers"] == "relative":
        src.mkdir(parents=True)
        (moddir / "build").symlink_to(f"../../../usr/src/linux-headers-{version}")
    if spec["module"] != "none":
        target = moddir / spec["module"]
        target.mkdir(parents=True)
        body = b"\x7fELF module" + (MARKER if spec["signed"] else b"")
        (target / f"nvidia{spec['suffix']}").write_bytes(body)
    if spec["log"] != "none":
        log = root / "var/lib/dkms/nvidia/580.95.05" / version / "x86_64" / "log" / "make.log"
        log.parent.mkdir(parents=True)
        text = "make -C /lib/modules/... modules\n"
        text += ("nvidia/nv.c:42:10: fatal error: linux/foo.h: No such file or directory\n"
                 if spec["log"] == "error" else "done.\n")
        log.write_text(text)


def _expected(spec: dict[str, Any], secure_boot: bool) -> str | None:
    """What the check must say about a kernel drawn with `spec` (the rule, from the drawing)."""
    if not spec["modules_dir"]:
        return "no_modules"
    if spec["module"] == "none":
        if spec["headers"] in ("none", "dangling"):
            return "no_headers"
        return "build_failed" if spec["log"] != "none" else "not_built"
    # Without modinfo a compressed module's signature cannot be read: unsigned under Secure Boot.
    if secure_boot and not (spec["signed"] and spec["suffix"] == ".ko"):
        return "unsigned"
    return None


@settings(max_examples=150, deadline=None)
@given(kernels=st.dictionaries(VERSIONS, KERNEL, min_size=1, max_size=5), secure_boot=st.booleans())
def test_every_bootable_kernel_is_reported_with_its_cause(kernels: dict[str, dict[str, Any]],
                                                          secure_boot: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for version, spec in kernels.items():
            _plant(root, version, spec)
        (root / "boot" / "vmlinuz-0-rescue-0123456789abcdef").write_bytes(b"rescue")
        result = module.gather(str(root), OPTIONS, None, None, None)
    listed = [k["version"] for k in result["kernels"]]
    assert sorted(listed) == sorted(kernels), "every vmlinuz-<ver> but the rescue image is listed"
    assert listed == sorted(listed, key=module._version_key)
    found = filters.nvidia_kernel_problems(result["kernels"], secure_boot)
    problems = {p["kernel"]: p for p in found}
    for version, spec in kernels.items():
        want = _expected(spec, secure_boot)
        got = problems.get(version)
        assert (got and got["code"]) == want, (version, spec, got)
        if got:
            assert version in got["cause"] and "\n" not in got["cause"]
        if got and want == "build_failed" and spec["log"] == "error":
            assert "fatal error: linux/foo.h" in got["cause"]


def test_grubby_entries_count_and_rescue_does_not() -> None:
    grubby = ('index=0\nkernel="/boot/vmlinuz-5.14.0-503.14.1.el9_5.x86_64"\nargs="ro"\n'
              'index=1\nkernel="/boot/vmlinuz-0-rescue-4c1b"\n'
              'index=2\nkernel=/boot/vmlinuz-5.14.0-427.13.1.el9_4.x86_64\n')
    with tempfile.TemporaryDirectory() as tmp:
        assert module.boot_kernels(tmp, grubby) == [
            "5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.14.1.el9_5.x86_64"]


def test_modinfo_signer_decides_over_the_marker() -> None:
    """modinfo's own fields (kmod's output for a signed module) say signed even when compressed."""
    text = ("filename:       /lib/modules/6.8.0-45-generic/updates/dkms/nvidia.ko.zst\n"
            "signer:         DKMS module signing key\n"
            "sig_key:        3A:6B:01\n\t\t7C:9D\n"
            "sig_hashalgo:   sha512\n")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _plant(root, "6.8.0-45-generic", {
            "modules_dir": True, "headers": "dir", "module": "updates/dkms",
            "suffix": ".ko.zst", "signed": False, "log": "none"})
        result = module.gather(str(root), OPTIONS, None, lambda _args: (0, text), None)
    entry = result["kernels"][0]
    assert entry["signer"] == "DKMS module signing key" and entry["sig_key"] == "3A:6B:017C:9D"
    assert not filters.nvidia_kernel_problems(result["kernels"], True)


UBUNTU_CASES = [
    # (kernel, release, installed meta-packages, headers meta)
    ("6.8.0-45-generic", "24.04", ["linux-image-generic", "linux-generic"],
     ["linux-headers-generic"]),
    ("6.8.0-45-generic", "22.04", ["linux-generic-hwe-22.04"], ["linux-headers-generic-hwe-22.04"]),
    ("6.8.0-45-generic", "22.04", [], ["linux-headers-generic-hwe-22.04"]),
    # the HWE edge kernel's meta-package: the release, then -edge
    ("6.8.0-45-generic", "22.04", ["linux-generic-hwe-22.04-edge"],
     ["linux-headers-generic-hwe-22.04-edge"]),
    ("5.15.0-122-generic", "22.04", [], ["linux-headers-generic"]),
    ("6.8.0-1015-aws", "24.04", ["linux-aws", "linux-image-aws"], ["linux-headers-aws"]),
    ("6.8.0-1017-azure", "22.04", [], ["linux-headers-azure"]),
    ("6.8.0-1014-gcp", "24.04", ["linux-image-gcp"], ["linux-headers-gcp"]),
    ("6.8.0-1010-oem", "24.04", ["linux-image-oem-24.04"], ["linux-headers-oem-24.04"]),
    ("6.8.0-1013-nvidia", "22.04", ["linux-nvidia-6.8"], ["linux-headers-nvidia-6.8"]),
]
DEBIAN_CASES = [
    ("6.1.0-28-amd64", "12", ["linux-image-amd64"], ["linux-headers-amd64"]),
    ("6.1.0-28-amd64", "12", [], ["linux-headers-amd64"]),
    ("6.1.0-28-cloud-amd64", "12", ["linux-image-cloud-amd64"], ["linux-headers-cloud-amd64"]),
    ("6.1.0-28-arm64", "12", [], ["linux-headers-arm64"]),
    ("6.1.0-28-rt-amd64", "12", ["linux-image-rt-amd64"], ["linux-headers-rt-amd64"]),
]


@given(case=st.sampled_from(UBUNTU_CASES),
       noise=st.lists(st.sampled_from([
           "linux-headers-6.8.0-45-generic", "linux-image-6.8.0-45-generic",
           "linux-modules-extra-6.8.0-45-generic", "linux-firmware", "linux-headers-generic"]),
           max_size=4))
def test_ubuntu_headers_meta_follows_the_running_flavour(
        case: tuple[str, str, list[str], list[str]], noise: list[str]) -> None:
    kernel, release, installed, want = case
    assert filters.nvidia_headers_meta(kernel, "Ubuntu", release, installed + noise) == want


@given(case=st.sampled_from(DEBIAN_CASES), noise=st.lists(st.sampled_from([
    "linux-image-6.1.0-28-amd64", "linux-headers-6.1.0-28-common", "linux-image-amd64-dbg",
    "firmware-linux"]), max_size=4))
def test_debian_headers_meta_follows_the_running_flavour(
        case: tuple[str, str, list[str], list[str]], noise: list[str]) -> None:
    kernel, release, installed, want = case
    assert filters.nvidia_headers_meta(kernel, "Debian", release, installed + noise) == want


def test_headers_per_kernel_and_meta_per_family() -> None:
    assert filters.nvidia_kernel_headers(["6.1.0-28-amd64"], "Debian") == [
        "linux-headers-6.1.0-28-amd64"]
    assert filters.nvidia_kernel_headers(["5.14.0-503.14.1.el9_5.x86_64"], "RedHat") == [
        "kernel-devel-5.14.0-503.14.1.el9_5.x86_64"]
    assert filters.nvidia_headers_meta("5.14.0-503.14.1.el9_5.x86_64", "Rocky", "9.5") == []


def _efivar(value: int) -> bytes:
    """An efivarfs file of a one-byte UEFI global variable: 4 attribute bytes (0x06, boot-service
    and runtime access, little-endian; the kernel's Documentation/filesystems/efivarfs.rst), then
    the byte (UEFI 2.x "Globally Defined Variables": SecureBoot 1 = on, SetupMode 0 = user mode)."""
    return struct.pack("<I", 0x06) + bytes([value])


GOOD: dict[str, Any] = {"modules_dir": True, "headers": "link", "module": "updates/dkms",
                        "suffix": ".ko", "signed": True, "log": "none"}


def test_the_roles_tasks_stop_before_the_reboot_naming_kernel_and_cause(tmp_path: Path) -> None:
    """The role's real tasks/kernel-check.yml on this machine, one host per case, each reading its
    own tree (nvidia_driver_kernel_root; the fix stays off there, as it acts on the host itself)."""
    cases: dict[str, tuple[dict[str, dict[str, Any]], bool]] = {
        "healthy": ({"6.1.0-9-amd64": GOOD, "6.1.0-10-amd64": GOOD}, True),
        "new_kernel_no_headers": ({"6.1.0-10-amd64": GOOD,
                                   "6.1.0-28-amd64": {**GOOD, "headers": "none", "module": "none"}},
                                  False),
        "dkms_failed": ({"6.1.0-28-amd64": {**GOOD, "module": "none", "log": "error"}}, False),
        "unsigned_secure_boot": ({"6.1.0-28-amd64": {**GOOD, "signed": False}}, True),
    }
    inventory: dict[str, dict[str, str]] = {}
    for name, (kernels, secure_boot) in cases.items():
        root = tmp_path / name / "root"
        root.mkdir(parents=True)
        for version, spec in kernels.items():
            _plant(root, version, spec)
        efivars = tmp_path / name / "efi" / "efivars"
        efivars.mkdir(parents=True)
        (efivars / f"SecureBoot-{GUID}").write_bytes(_efivar(1 if secure_boot else 0))
        (efivars / f"SetupMode-{GUID}").write_bytes(_efivar(0))
        inventory[name] = {"nvidia_driver_kernel_root": str(root),
                           "nvidia_driver_efi_path": str(efivars.parent)}
    play = [{
        "name": "The role's kernel check, one host per case",
        "hosts": "all",
        "gather_facts": True,
        "gather_subset": ["!all", "!min", "distribution", "platform"],
        # The site's header packages stand in for the flavour's meta-package (this machine's
        # kernel is no distribution's); the fix is off under another root, the list is kept.
        "vars": {"nvidia_driver_kernel_headers_packages": ["linux-headers-amd64"]},
        "tasks": [
            {"name": "Check", "ansible.builtin.include_role": {
                "name": "nvidia_driver", "tasks_from": "kernel-check",
                "apply": {"ignore_errors": True}}},
            {"name": "Keep the headers the fix would install", "ansible.builtin.copy": {
                "dest": f"{tmp_path}/{{{{ inventory_hostname }}}}.json",
                "content": "{{ [ansible_facts['os_family'], __nvidia_driver_kc_headers]"
                           " | to_json }}"}},
        ],
    }]
    run = run_local_play(tmp_path, play, hosts=inventory)
    out = " ".join(run.output.split())
    family, headers = json.loads((tmp_path / "new_kernel_no_headers.json").read_text())
    prefix = "kernel-devel-" if family == "RedHat" else "linux-headers-"
    assert headers == [prefix + "6.1.0-28-amd64", "linux-headers-amd64"], headers
    assert json.loads((tmp_path / "healthy.json").read_text())[1] == ["linux-headers-amd64"]
    assert "Every bootable kernel of healthy has its NVIDIA module (6.1.0-9-amd64, 6.1.0-10-amd64;"\
        " Secure Boot on: signed)" in out, run.explain()
    assert "new_kernel_no_headers would boot a kernel without its NVIDIA module: 6.1.0-28-amd64:" \
        " no headers for 6.1.0-28-amd64" in out, run.explain()
    assert "Fix: install linux-headers-6.1.0-28-amd64 and run `dkms autoinstall" in out
    assert "6.1.0-10-amd64: " not in out, "a kernel with its module is not named"
    assert "the DKMS build of the NVIDIA module failed for 6.1.0-28-amd64" in out
    assert "fatal error: linux/foo.h: No such file or directory" in out
    assert "/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko for 6.1.0-28-amd64 is unsigned" \
        " and Secure Boot is on" in out, run.explain()
    assert "Nothing was rebooted" in out


def test_ubuntu_signed_modules_name_the_module_package_not_headers() -> None:
    prefix = "linux-modules-nvidia-580-server-open-"
    assert filters.nvidia_kernel_headers(["6.8.0-51-generic"], "Debian", prefix) == [
        "linux-modules-nvidia-580-server-open-6.8.0-51-generic"]
