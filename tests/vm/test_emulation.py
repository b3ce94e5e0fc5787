"""When the emulated guests run: always under KVM, under TCG only when asked for."""

from __future__ import annotations

import pytest

from tests.vm import emulation


@pytest.mark.parametrize(("domain", "setting", "skipped"), [
    ("kvm", None, False), ("kvm", "0", False),
    ("qemu", None, True), ("qemu", "0", True), ("qemu", "yes", True), ("qemu", "1", False),
])
def test_an_emulated_guest_runs_only_when_asked_for(
    monkeypatch: pytest.MonkeyPatch, domain: str, setting: str | None, skipped: bool
) -> None:
    monkeypatch.setattr(emulation, "domain_type", lambda: domain)
    environ = {} if setting is None else {emulation.OPT_IN: setting}
    assert emulation.emulated_guests_skipped(environ) is skipped


def test_the_skip_names_the_setting() -> None:
    assert f"{emulation.OPT_IN}=1" in emulation.SKIP_REASON
