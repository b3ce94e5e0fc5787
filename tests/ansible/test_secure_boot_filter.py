"""efi_secure_boot / mokutil_secure_boot / secure_boot_decision: Secure Boot from efivarfs.

The inputs are what `slurp` returns for /sys/firmware/efi/efivars/SecureBoot-<GUID> and
SetupMode-<GUID> (base64 of 4 attribute bytes, little-endian, then the data) and what
`mokutil --sb-state` prints. The play-level refusal from the EFI variable alone is in
tests/hardware/test_hgx_converge.py (on the HGX stand-in, without mokutil).
"""

from __future__ import annotations

import base64
import struct

from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters

FILTERS = load_filters("secure_boot.py")
efi_secure_boot = FILTERS["efi_secure_boot"]
mokutil_secure_boot = FILTERS["mokutil_secure_boot"]
secure_boot_decision = FILTERS["secure_boot_decision"]

# The attributes a firmware gives SecureBoot: boot-service and runtime access (0x06).
BS_RT = 0x00000006


def _efivar(data: bytes, attributes: int = BS_RT) -> str:
    """An efivarfs file's content as slurp returns it."""
    return base64.b64encode(struct.pack("<I", attributes) + data).decode()


def test_the_firmwares_answers() -> None:
    assert efi_secure_boot(_efivar(b"\x01"), _efivar(b"\x00")) is True
    assert efi_secure_boot(_efivar(b"\x00"), _efivar(b"\x00")) is False
    assert efi_secure_boot(_efivar(b"\x01")) is True  # no SetupMode variable: on
    assert efi_secure_boot(_efivar(b"\x01"), _efivar(b"\x01")) is False  # Setup Mode
    assert efi_secure_boot(None) is None  # no variable: no answer, mokutil is asked


@given(attributes=st.integers(min_value=0, max_value=2**32 - 1),
       value=st.integers(min_value=0, max_value=255),
       setup=st.one_of(st.none(), st.binary(max_size=8)))
def test_a_one_byte_variable_is_on_unless_zero_or_in_setup_mode(
        attributes: int, value: int, setup: bytes | None) -> None:
    """The kernel's rule (efi_get_secureboot): off when SecureBoot is 0 or SetupMode is 1;
    a reserved SecureBoot value counts as on; the attributes never matter."""
    setup_content = None if setup is None else base64.b64encode(setup).decode()
    in_setup_mode = setup is not None and len(setup) == 5 and setup[4] == 1
    assert efi_secure_boot(_efivar(bytes([value]), attributes), setup_content) is (
        value != 0 and not in_setup_mode)


@given(content=st.binary(max_size=64).filter(lambda raw: len(raw) != 5))
def test_any_other_size_is_no_answer(content: bytes) -> None:
    assert efi_secure_boot(base64.b64encode(content).decode()) is None
    assert efi_secure_boot(content) is None
    decision = secure_boot_decision(base64.b64encode(content).decode(), None,
                                    "SecureBoot enabled\n", True)
    assert decision == {"on": True, "source": "mokutil --sb-state (EFI variables unreadable)"}


@given(text=st.text(max_size=40))
def test_text_that_is_not_base64_is_no_answer(text: str) -> None:
    try:
        decoded = base64.b64decode(text, validate=True)
    except ValueError:
        decoded = None
    expected = None if decoded is None or len(decoded) != 5 else decoded[4] != 0
    assert efi_secure_boot(text) is expected


def test_mokutils_answers() -> None:
    assert mokutil_secure_boot("SecureBoot enabled\n") is True
    assert mokutil_secure_boot("SecureBoot enabled\nSecureBoot validation is disabled in shim\n")
    assert mokutil_secure_boot("SecureBoot disabled\nPlatform is in Setup Mode\n") is False
    assert mokutil_secure_boot("EFI variables are not supported on this system\n") is None
    assert mokutil_secure_boot("") is None and mokutil_secure_boot(None) is None


def test_each_decision_names_its_source() -> None:
    on = _efivar(b"\x01")
    assert secure_boot_decision(on, _efivar(b"\x00"), "SecureBoot disabled\n") == {
        "on": True, "source": "the EFI variable SecureBoot"}  # the firmware outranks mokutil
    assert secure_boot_decision(on, _efivar(b"\x01")) == {
        "on": False,
        "source": "the EFI variable SecureBoot (SetupMode 1: the firmware is in Setup Mode)"}
    assert secure_boot_decision(None, None, "SecureBoot disabled\n", True) == {
        "on": False, "source": "mokutil --sb-state (EFI variables unreadable)"}
    assert secure_boot_decision(None, None, None, False, False) == {
        "on": False,
        "source": "nothing: unknown, taken as off (no EFI firmware: a legacy BIOS boot)"}
    assert secure_boot_decision(None, None, None, False, True)["source"].endswith(
        "(EFI variables unreadable, and mokutil is not installed)")
    assert secure_boot_decision(None, None, "", True, True)["source"].endswith(
        "(EFI variables unreadable, and mokutil gave no answer)")
