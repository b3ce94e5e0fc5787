"""The gpu_passthrough_facts module's decisions, on fake sysfs trees.

The module is imported from the role's library/ folder, so these tests run
the code Ansible ships to the host, not a copy.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.hypervisor.fake_sysfs import (
    CONSUMER_GPU,
    P100,
    SEED_HOST,
    FakeFunction,
    build_sysfs,
    without_iommu,
)

LIBRARY = (Path(__file__).resolve().parents[2] / "ansible" / "roles" / "gpu_passthrough"
           / "library" / "gpu_passthrough_facts.py")


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_passthrough_facts", LIBRARY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


facts = _load()


def inspect(root: Path, vendors: tuple[str, ...] = ("10de",), ids: tuple[str, ...] = (),
            addresses: tuple[str, ...] = (), include_functions: bool = True) -> dict:
    return facts.inspect(str(root), list(vendors), list(ids), list(addresses), include_functions)


def addresses_of(devices: list[dict]) -> list[str]:
    return [device["address"] for device in devices]


def test_finds_the_seed_hosts_four_p100s_and_leaves_the_console_vga(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, SEED_HOST))
    assert addresses_of(found["selected"]) == [
        "0000:18:00.0", "0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"]
    assert found["ids"] == [P100]
    assert found["iommu_enabled"] is True
    assert found["conflicts"] == []
    # Each P100 shares its group with its root port only, which vfio accepts.
    group_20 = next(group for group in found["groups"] if group["group"] == "20")
    assert [(d["address"], d["passthrough"]) for d in group_20["devices"]] == [
        ("0000:17:00.0", False), ("0000:18:00.0", True)]


def test_a_gpu_takes_the_other_functions_of_its_slot(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, CONSUMER_GPU))
    assert addresses_of(found["selected"]) == [
        "0000:01:00.0", "0000:01:00.1", "0000:01:00.2", "0000:01:00.3"]
    assert found["ids"] == ["10de:10f8", "10de:1ad8", "10de:1ad9", "10de:1e87"]


def test_the_slot_functions_stay_behind_when_asked(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, CONSUMER_GPU), include_functions=False)
    assert addresses_of(found["selected"]) == ["0000:01:00.0"]
    # Its audio function is in the same group and stays on the host: vfio refuses that.
    assert addresses_of(found["conflicts"]) == ["0000:01:00.1", "0000:01:00.2", "0000:01:00.3"]


def test_a_gpu_sharing_its_group_with_a_nic_is_a_conflict(tmp_path: Path) -> None:
    shared = [*SEED_HOST[:4], FakeFunction("0000:18:00.0", P100, "030200", "20", "nvidia"),
              FakeFunction("0000:19:00.0", "8086:1563", "020000", "20", "ixgbe")]
    found = inspect(build_sysfs(tmp_path, shared))
    assert [(d["address"], d["group"], d["driver"]) for d in found["conflicts"]] == [
        ("0000:19:00.0", "20", "ixgbe")]


def test_explicit_ids_select_and_report_what_is_absent(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, SEED_HOST), ids=("10DE:15F8", "10de:1db4"))
    assert len(found["selected"]) == 4
    assert found["ids"] == [P100, "10de:1db4"]
    assert found["missing_ids"] == ["10de:1db4"]


def test_addresses_select_and_identical_cards_left_behind_are_collateral(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, SEED_HOST), addresses=("18:00.0", "0000:3b:00.0"))
    assert addresses_of(found["selected"]) == ["0000:18:00.0", "0000:3b:00.0"]
    # ids=10de:15f8 would make vfio-pci take the other two P100s as well.
    assert addresses_of(found["collateral"]) == ["0000:86:00.0", "0000:af:00.0"]


def test_without_iommu_there_are_no_groups_to_check(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, without_iommu(SEED_HOST)))
    assert found["iommu_enabled"] is False
    assert found["groups"] == [] and found["conflicts"] == []
    assert len(found["selected"]) == 4


def test_no_nvidia_gpu_selects_nothing(tmp_path: Path) -> None:
    found = inspect(build_sysfs(tmp_path, [f for f in SEED_HOST if f.pci_id != P100]))
    assert found["selected"] == [] and found["ids"] == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ids": ("10de-15f8",)}, "'10de-15f8' is not a vendor:device ID"),
        ({"addresses": ("65:00",)}, "'65:00' is not a PCI address"),
        ({"addresses": ("0000:65:00.0",)}, "no PCI device at 0000:65:00.0"),
    ],
)
def test_bad_requests_name_the_value_and_the_fix(tmp_path: Path, kwargs: dict,
                                                 message: str) -> None:
    with pytest.raises(facts.SelectionError, match=message) as raised:
        inspect(build_sysfs(tmp_path, SEED_HOST), **kwargs)
    assert "lspci" in str(raised.value)


def test_a_missing_sysfs_is_reported(tmp_path: Path) -> None:
    with pytest.raises(facts.SelectionError, match="is sysfs mounted"):
        inspect(tmp_path / "nowhere")
