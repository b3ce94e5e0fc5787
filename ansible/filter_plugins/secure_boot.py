"""Ansible filters: whether Secure Boot is on, from the firmware's EFI variables or mokutil.

Why: a DKMS-built NVIDIA module is unsigned, and a kernel booted with Secure Boot on
refuses it after the reboot. `mokutil` is not installed everywhere, so the role reads
the firmware's own answer first: the `SecureBoot` variable of the EFI global-variable
GUID, which efivarfs shows as /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-
aa0d-00e098032b8c (readable by every user). `mokutil --sb-state` reads the same
variable; it stays the fallback where efivarfs is not readable.

An efivarfs file is the variable's 32-bit attributes (little-endian, 4 bytes) and then
its data. UEFI defines SecureBoot and SetupMode as one byte each (UEFI 2.x, "Globally
Defined Variables": SecureBoot 1 = the platform boots in Secure Boot mode, 0 = not;
SetupMode 1 = Setup Mode, 0 = User Mode; other values reserved). The decision follows
the kernel's (efi_get_secureboot in drivers/firmware/efi/libstub/secureboot.c), which is
what enforces module signatures: Secure Boot is off when SecureBoot's byte is 0 or
SetupMode's is 1, and on for any other SecureBoot byte (a reserved value is taken as on:
refusing is recoverable, an unloadable driver after the reboot is not). A file that is
not exactly 4 + 1 bytes is no answer (None): the role falls back to mokutil.

    {{ secureboot_slurp.content | efi_secure_boot(setupmode_slurp.content | default(none)) }}
    -> True / False / None
    {{ secureboot_slurp.content | secure_boot_decision(setupmode, mokutil_stdout, ...) }}
    -> {"on": True, "source": "the EFI variable SecureBoot"}

Every answer names its source, so the play can say which one decided: the EFI
variables; `mokutil --sb-state`; else "unknown, taken as off" (no EFI firmware
directory: a legacy BIOS boot, which has no Secure Boot).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

# The attributes' size in an efivarfs file, and a one-byte variable's whole size.
_ATTRIBUTES = 4
_ONE_BYTE_VARIABLE = _ATTRIBUTES + 1


def _data_byte(content: str | bytes | None) -> int | None:
    """The single data byte of a one-byte EFI variable (base64 as `slurp` returns it, or
    raw bytes); None for anything else."""
    if content is None:
        return None
    if isinstance(content, bytes):
        raw = content
    else:
        try:
            raw = base64.b64decode(str(content), validate=True)
        except (binascii.Error, ValueError):
            return None
    if len(raw) != _ONE_BYTE_VARIABLE:
        return None
    return raw[_ATTRIBUTES]


def efi_secure_boot(secure_boot: str | bytes | None,
                    setup_mode: str | bytes | None = None) -> bool | None:
    """Secure Boot as the kernel will see it: True (on), False (off), None (no answer)."""
    value = _data_byte(secure_boot)
    if value is None:
        return None
    if value == 0:
        return False
    return _data_byte(setup_mode) != 1


def mokutil_secure_boot(stdout: str | None) -> bool | None:
    """`mokutil --sb-state`'s answer: True for "SecureBoot enabled", False for "SecureBoot
    disabled", None for anything else (an error, "EFI variables are not supported on
    this system")."""
    lines = [line.strip() for line in (stdout or "").splitlines()]
    if "SecureBoot enabled" in lines:
        return True
    if "SecureBoot disabled" in lines:
        return False
    return None


def secure_boot_decision(secure_boot: str | bytes | None, setup_mode: str | bytes | None = None,
                         mokutil: str | None = None, mokutil_installed: bool = False,
                         efi_firmware: bool = True) -> dict[str, Any]:
    """The state and what decided it: the EFI variables first, then mokutil's answer, then
    "unknown, taken as off" (the role's behaviour without either, unchanged)."""
    from_efi = efi_secure_boot(secure_boot, setup_mode)
    if from_efi is not None:
        setup = from_efi is False and _data_byte(secure_boot) != 0
        return {"on": from_efi, "source": "the EFI variable SecureBoot"
                + (" (SetupMode 1: the firmware is in Setup Mode)" if setup else "")}
    from_mokutil = mokutil_secure_boot(mokutil)
    if from_mokutil is not None:
        return {"on": from_mokutil, "source": "mokutil --sb-state (EFI variables unreadable)"}
    if not efi_firmware:
        why = "no EFI firmware: a legacy BIOS boot"
    elif mokutil_installed:
        why = "EFI variables unreadable, and mokutil gave no answer"
    else:
        why = "EFI variables unreadable, and mokutil is not installed"
    return {"on": False, "source": f"nothing: unknown, taken as off ({why})"}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"efi_secure_boot": efi_secure_boot, "mokutil_secure_boot": mokutil_secure_boot,
                "secure_boot_decision": secure_boot_decision}
