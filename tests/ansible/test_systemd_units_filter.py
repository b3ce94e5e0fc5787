"""systemd_units: the `systemctl show` reader behind gpu_passthrough's libvirt step.

The text is what systemd 252 prints for `systemctl show --property=Id,LoadState,
UnitFileState,ActiveState` over a loaded, an active and a missing unit; the
Rocky hypervisor test (tests/hypervisor/test_rocky_hypervisor.py) runs the
filter through the role against real systemd.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.ansible.filter_plugin import load_filters

systemd_units: Callable[[str], dict[str, dict[str, str]]] = load_filters("systemd_units.py")[
    "systemd_units"]

SHOW = """\
Id=libvirtd.socket
ActiveState=active
LoadState=loaded
UnitFileState=enabled

Id=virtqemud.socket
ActiveState=inactive
LoadState=loaded
UnitFileState=disabled

Id=libvirtd-tcp.socket
ActiveState=inactive
LoadState=not-found
UnitFileState=
"""


def test_each_block_becomes_one_unit_in_order() -> None:
    units = systemd_units(SHOW)
    assert list(units) == ["libvirtd.socket", "virtqemud.socket", "libvirtd-tcp.socket"]
    assert units["libvirtd.socket"] == {"ActiveState": "active", "LoadState": "loaded",
                                        "UnitFileState": "enabled"}
    assert units["libvirtd-tcp.socket"]["LoadState"] == "not-found"
    assert units["libvirtd-tcp.socket"]["UnitFileState"] == ""


def test_a_value_with_an_equals_sign_stays_whole() -> None:
    units = systemd_units("Id=a.service\nDescription=x=y\n")
    assert units == {"a.service": {"Description": "x=y"}}


def test_empty_output_is_no_units() -> None:
    assert systemd_units("") == {}
    assert systemd_units("\n\n") == {}


def test_a_block_without_an_id_is_refused() -> None:
    with pytest.raises(ValueError, match="without Id="):
        systemd_units("LoadState=loaded\n")
