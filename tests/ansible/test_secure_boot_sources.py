"""secure_boot_sources (nvidia_driver's library): every Secure Boot source in one module run.

The module only reads (the firmware's SecureBoot and SetupMode efivarfs files, `mokutil
--sb-state`, whether the EFI directory exists); the decision stays in the role's
`secure_boot_decision` filter. So the module is held to this: whatever bytes the
firmware's files hold, the filter decides from the module's result exactly what it
decides from the files' own bytes. The play at the end runs the role's real tasks
(tasks/secureboot.yml) on this machine, one host per source that can decide.
"""

from __future__ import annotations

import base64
import json
import struct
import tempfile
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters, load_library_module
from tests.ansible.playbook import ANSIBLE_DIR, run_local_play

ROLE = ANSIBLE_DIR / "roles" / "nvidia_driver"
GUID = yaml.safe_load((ROLE / "vars" / "secureboot.yml").read_text())[
    "__nvidia_driver_efi_global_guid"]
secure_boot_decision = load_filters("secure_boot.py")["secure_boot_decision"]


module = load_library_module("secure_boot_sources.py", "nvidia_driver")


def _efivar(data: bytes, attributes: int = 0x06) -> bytes:
    """An efivarfs file: 4 attribute bytes, little-endian, then the data (the kernel's
    Documentation/filesystems/efivarfs.rst); SecureBoot and SetupMode hold one data byte each
    (UEFI 2.x, "Globally Defined Variables"), 0x06 = boot-service and runtime access."""
    return struct.pack("<I", attributes) + data


def _firmware(root: Path, secure_boot: bytes | None, setup_mode: bytes | None) -> Path:
    efivars = root / "efi" / "efivars"
    efivars.mkdir(parents=True)
    for name, content in (("SecureBoot", secure_boot), ("SetupMode", setup_mode)):
        if content is not None:
            (efivars / f"{name}-{GUID}").write_bytes(content)
    return root / "efi"


FILE = st.one_of(st.none(), st.binary(max_size=12),
                 st.builds(_efivar, st.binary(min_size=1, max_size=1),
                           st.integers(min_value=0, max_value=2**32 - 1)))


@settings(max_examples=200)
@given(secure_boot=FILE, setup_mode=FILE,
       mokutil=st.one_of(st.none(), st.sampled_from(
           ["SecureBoot enabled\n", "SecureBoot disabled\n",
            "EFI variables are not supported on this system\n", ""])))
def test_the_filter_decides_from_the_module_what_it_decides_from_the_files(
        secure_boot: bytes | None, setup_mode: bytes | None, mokutil: str | None) -> None:
    with tempfile.TemporaryDirectory() as root:
        efi = _firmware(Path(root), secure_boot, setup_mode)
        result = module.sources(str(efi), GUID, mokutil is not None, mokutil)
    assert result["efi_firmware"] is True
    for name, content in (("secure_boot", secure_boot), ("setup_mode", setup_mode)):
        assert result[name] == (None if content is None else base64.b64encode(content).decode())
    assert secure_boot_decision(
        result["secure_boot"], result["setup_mode"], result["mokutil_stdout"],
        result["mokutil_installed"], result["efi_firmware"],
    ) == secure_boot_decision(secure_boot, setup_mode, mokutil, mokutil is not None, True)


def test_no_firmware_directory_is_a_legacy_boot(tmp_path: Path) -> None:
    result = module.sources(str(tmp_path / "absent"), GUID, False, None)
    assert result == {"secure_boot": None, "setup_mode": None, "mokutil_installed": False,
                      "mokutil_stdout": None, "efi_firmware": False}


def test_an_unreadable_variable_is_no_answer(tmp_path: Path) -> None:
    """efivarfs can refuse a read (EIO on some firmwares): the file's name is there, its
    bytes are not; a directory in the variable's place stands for it here."""
    efi = _firmware(tmp_path, None, _efivar(b"\x00"))
    (efi / "efivars" / f"SecureBoot-{GUID}").mkdir()
    assert module.sources(str(efi), GUID, False, None)["secure_boot"] is None


# One host per source that can decide; each gets its own firmware tree and PATH.
MOKUTIL_ENABLED = "#!/bin/sh\necho 'SecureBoot enabled'\n"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_the_roles_tasks_name_the_source_that_decided(tmp_path: Path) -> None:
    hosts = {
        # The firmware says on: the play stops (this machine is not Ubuntu) with the MOK steps.
        "efi_on": (_efivar(b"\x01"), _efivar(b"\x00"), None),
        # The firmware says off; a mokutil that says enabled is not asked first.
        "efi_off": (_efivar(b"\x00"), _efivar(b"\x00"), MOKUTIL_ENABLED),
        # No readable variable: mokutil decides.
        "mokutil_on": (None, None, MOKUTIL_ENABLED),
        # No EFI directory at all, no mokutil: a legacy BIOS boot, off.
        "bios": None,
    }
    inventory: dict[str, dict[str, str]] = {}
    for name, firmware in hosts.items():
        bin_dir = tmp_path / name / "bin"
        bin_dir.mkdir(parents=True)
        efi = tmp_path / name / "no-efi"
        if firmware is not None:
            efi = _firmware(tmp_path / name, firmware[0], firmware[1])
            if firmware[2] is not None:
                (bin_dir / "mokutil").write_text(firmware[2])
                (bin_dir / "mokutil").chmod(0o755)
        inventory[name] = {"nvidia_driver_efi_path": str(efi),
                           "search_path": f"{bin_dir}:{SYSTEM_PATH}"}
    results = tmp_path / "decided"
    results.mkdir()
    play = [{
        "name": "The role's Secure Boot detection, one host per source",
        "hosts": "all",
        "gather_facts": True,
        "gather_subset": ["!all", "!min", "distribution"],
        "environment": {"PATH": "{{ search_path }}"},
        "vars": {"nvidia_driver_packages": []},
        "tasks": [
            {"name": "Decide", "ansible.builtin.include_role": {
                "name": "nvidia_driver", "tasks_from": "secureboot",
                "apply": {"ignore_errors": True}}},
            {"name": "Keep the decision", "ansible.builtin.copy": {
                "dest": f"{results}/{{{{ inventory_hostname }}}}.json",
                "content": "{{ [__nvidia_driver_secure_boot | bool,"
                           " __nvidia_driver_secure_boot_source] | to_json }}"}},
        ],
    }]
    run = run_local_play(tmp_path, play, hosts=inventory)
    assert run.returncode == 0, run.explain()
    decided = {path.stem: tuple(json.loads(path.read_text())) for path in results.iterdir()}
    assert decided == {
        "efi_on": (True, "the EFI variable SecureBoot"),
        "efi_off": (False, "the EFI variable SecureBoot"),
        "mokutil_on": (True, "mokutil --sb-state (EFI variables unreadable)"),
        "bios": (False, "nothing: unknown, taken as off (no EFI firmware: a legacy BIOS boot)"),
    }
    # The two hosts with Secure Boot on stop with the MOK steps (this machine is not Ubuntu).
    assert run.output.count("mokutil --import /var/lib/dkms/mok.pub") >= 2, run.explain()
