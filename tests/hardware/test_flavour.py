"""The kernel-module flavour, branch and Fabric Manager decisions, on every fake machine.

The nvidia_gpu_facts module is imported from the role's library/ folder and
fed the role's own generation table, so these tests run the code and data
Ansible ships, at unit-test speed.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.filter_plugin import load_library_module
from tests.hardware.machines import (
    A100_HGX,
    B200_HGX,
    B300_HGX,
    GB200,
    GH200,
    GPU_CLASS,
    H100_HGX,
    H100_PCIE,
    P100,
    PASCAL_AMPERE,
    T4,
    TITAN_V,
    V100,
    Machine,
)
from tests.hypervisor.fake_sysfs import FakeFunction, build_sysfs

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "nvidia_driver"
TABLE: list[dict[str, Any]] = yaml.safe_load(
    (ROLE / "vars" / "gpu_generations.yml").read_text())["__nvidia_driver_gpu_generations"]


facts = load_library_module("nvidia_gpu_facts.py", "nvidia_driver")


RETIRED = yaml.safe_load(
    (ROLE / "vars" / "gpu_generations.yml").read_text())["__nvidia_driver_retired_flavours"]


def decide(machine: Machine, tmp_path: Path, kernel_modules: str = "auto",
           branch: str = "570") -> dict[str, Any]:
    result: dict[str, Any] = facts.decide(str(machine.build(tmp_path)), TABLE, kernel_modules,
                                          branch, "5.2", RETIRED)
    return result


def refusal(machine: Machine, tmp_path: Path, kernel_modules: str = "auto",
            branch: str = "570") -> str:
    with pytest.raises(facts.Refused) as refused:
        decide(machine, tmp_path, kernel_modules, branch)
    return str(refused.value)


# machine, flavour auto picks, NVSwitches, Fabric Manager, NVLink 5 (NVLSM + ib_umad)
EXPECTED = [
    (P100, "proprietary", 0, False, False),
    (V100, "proprietary", 0, False, False),
    (T4, "open", 0, False, False),
    (A100_HGX, "open", 6, True, False),
    (H100_HGX, "open", 4, True, False),
    (H100_PCIE, "open", 0, False, False),
    (B200_HGX, "open", 2, True, True),
    (PASCAL_AMPERE, "proprietary", 0, False, False),
    (TITAN_V, "proprietary", 0, False, False),
    (GH200, "open", 0, False, False),
    (GB200, "open", 0, False, False),
]


@pytest.mark.parametrize(("machine", "flavour", "switches", "fabric", "nvlink5"), EXPECTED,
                         ids=[row[0].name for row in EXPECTED])
def test_auto_picks_the_flavour_and_the_fabric_for_each_machine(
        tmp_path: Path, machine: Machine, flavour: str, switches: int, fabric: bool,
        nvlink5: bool) -> None:
    result = decide(machine, tmp_path)
    assert result["flavour"] == flavour
    assert len(result["gpus"]) == machine.gpus + len(machine.extra)
    assert len(result["nvswitches"]) == switches
    assert result["fabric_manager"] is fabric
    assert result["nvlink5"] is nvlink5
    assert result["unknown"] == []


def test_the_chipset_and_a_gpus_audio_function_are_not_gpus(tmp_path: Path) -> None:
    machine = Machine("rtx", "10de:1e87", 1, "RTX 2080", "7.5", 8192, extra=(
        FakeFunction("0000:18:00.1", "10de:10f8", "040300"),))
    result = decide(machine, tmp_path)
    assert [gpu["address"] for gpu in result["gpus"]] == ["0000:18:00.0"]
    assert result["gpus"][0]["generation"] == "Turing"


def test_a_host_without_nvidia_devices_gets_open_modules_and_no_fabric(tmp_path: Path) -> None:
    result = facts.decide(str(build_sysfs(tmp_path, []) / "bus/pci/devices"), TABLE, "auto",
                          "570", "5.2")
    assert (result["flavour"], result["gpus"], result["fabric_manager"]) == ("open", [], False)


@pytest.mark.parametrize("machine", [P100, V100], ids=["p100", "v100"])
def test_open_on_a_pre_turing_gpu_is_refused_naming_the_card_and_the_flavour_that_works(
        tmp_path: Path, machine: Machine) -> None:
    message = refusal(machine, tmp_path, kernel_modules="open")
    assert f"the open kernel modules cannot drive 0000:18:00.0 ({machine.gpu_id}" in message
    assert "proprietary can" in message
    assert "Nothing was changed" in message


def test_proprietary_on_blackwell_is_refused_naming_open(tmp_path: Path) -> None:
    message = refusal(B200_HGX, tmp_path, kernel_modules="proprietary")
    assert "proprietary kernel modules cannot drive 0000:18:00.0 (10de:2901, Blackwell" in message
    assert "open can" in message


def test_an_explicit_flavour_every_gpu_supports_is_kept(tmp_path: Path) -> None:
    assert decide(T4, tmp_path, kernel_modules="proprietary")["flavour"] == "proprietary"


def test_a_mix_no_flavour_drives_is_refused_naming_the_cards(tmp_path: Path) -> None:
    machine = Machine("pascal-blackwell", "10de:15f8", 1, "Tesla P100-PCIE-16GB", "6.0", 16384,
                      extra=(FakeFunction("0000:d0:00.0", "10de:2bb1", GPU_CLASS),))
    message = refusal(machine, tmp_path, branch="575")
    assert "no kernel-module flavour drives every GPU" in message
    assert "only open drives 0000:d0:00.0 (10de:2bb1, Blackwell)" in message
    assert "only proprietary drives 0000:18:00.0 (10de:15f8, Pascal (GP100))" in message


def test_a_branch_after_580_is_refused_for_pascal_naming_the_last_branch(tmp_path: Path) -> None:
    message = refusal(P100, tmp_path, branch="590")
    assert "driver branch 590 does not support 0000:18:00.0 (10de:15f8" in message
    assert "is 580" in message
    assert 'nvidia_driver_branch: "580"' in message
    assert decide(P100, tmp_path / "580", branch="580")["flavour"] == "proprietary"


def test_proprietary_on_branch_620_or_later_is_refused_naming_open(tmp_path: Path) -> None:
    message = refusal(T4, tmp_path, kernel_modules="proprietary", branch="620")
    assert "driver branch 620 ships no proprietary kernel modules" in message
    assert "nvidia_driver_kernel_modules: auto" in message and "before 620" in message
    assert decide(T4, tmp_path / "auto", branch="620")["flavour"] == "open"
    assert decide(T4, tmp_path / "595", kernel_modules="proprietary",
                  branch="595")["flavour"] == "proprietary"


def test_pascal_on_branch_620_is_refused_by_its_last_branch(tmp_path: Path) -> None:
    message = refusal(P100, tmp_path, branch="620")
    assert 'nvidia_driver_branch: "580"' in message


def test_a_branch_before_blackwell_is_refused(tmp_path: Path) -> None:
    message = refusal(B200_HGX, tmp_path, branch="550")
    assert "predates 0000:18:00.0 (10de:2901, Blackwell (datacenter))" in message
    assert 'nvidia_driver_branch: "570"' in message


def test_a_gpu_below_compute_capability_5_2_is_refused_before_install(tmp_path: Path) -> None:
    k80 = Machine("k80", "10de:102d", 2, "Tesla K80", "3.7", 11441)
    message = refusal(k80, tmp_path, branch="470")
    assert "0000:18:00.0 (10de:102d, Kepler)" in message
    assert "TensorFlow needs 5.2 or newer" in message


def test_a_gpu_the_table_does_not_know_is_reported_and_takes_open(tmp_path: Path) -> None:
    future = Machine("future", "10de:3f00", 1, "NVIDIA Next", "11.0", 274877)
    result = decide(future, tmp_path)
    assert result["flavour"] == "open"
    assert result["unknown"] == ["0000:18:00.0 (10de:3f00, unknown)"]
    assert "open kernel modules cannot" not in str(result)
    assert "proprietary kernel modules cannot drive" in refusal(future, tmp_path / "p",
                                                                 kernel_modules="proprietary")


def test_the_table_has_no_overlapping_blocks_and_names_its_source() -> None:
    blocks = sorted(facts._parse_block(block) for row in TABLE for block in row["ids"])
    for (_, last), (first, _) in itertools.pairwise(blocks):
        assert last < first
    header = (ROLE / "vars" / "gpu_generations.yml").read_text()
    assert "driver-installation-guide/kernel-modules.html" in header
    assert "Unix driver deprecation schedule" in header


def test_hgx_b300_gets_fabric_manager_and_nvlsm_from_its_gpu_id_alone(tmp_path: Path) -> None:
    """No NVSwitch on PCI (NVLink 5 switches are not NVIDIA PCI functions): the B300's
    row says NVLink 5. Before the fix it was unknown, open-only, with no Fabric Manager."""
    result = decide(B300_HGX, tmp_path, branch="580")
    assert (result["flavour"], result["fabric_manager"], result["nvlink5"]) == ("open", True, True)
    assert result["unknown"] == []
    assert "Blackwell Ultra" in result["gpus"][0]["generation"]


def test_b300_on_a_branch_before_580_is_refused(tmp_path: Path) -> None:
    assert "580" in refusal(B300_HGX, tmp_path, branch="570")


@pytest.mark.parametrize("machine", [GH200, GB200], ids=["gh200", "gb200"])
def test_proprietary_on_grace_modules_is_refused_naming_open(tmp_path: Path,
                                                             machine: Machine) -> None:
    message = refusal(machine, tmp_path, kernel_modules="proprietary")
    assert f"proprietary kernel modules cannot drive 0000:18:00.0 ({machine.gpu_id}" in message
    assert "open can" in message
