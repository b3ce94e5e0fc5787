"""nvidia_driver's fabric check (tasks/fabric-state.yml) and Fabric Manager package names,
run through Ansible on this machine against the nvidia-smi stub.

HGX A100 reports no fabric state in `nvidia-smi -q` (N/A: NVML's fabric info is for
Hopper and newer), so the check must accept N/A there as long as Fabric Manager is
running, and still insist on Completed/Success on Hopper and newer; Fabric Manager
must be running on both (a GPU's "Completed" outlives the daemon). A fake
`systemctl` on PATH answers `is-active` as a test tells it to.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ansible.playbook import PlaybookRun, run_local_play
from tests.fixtures.aptrepo.catalog import STUBS
from tests.hardware.machines import A100_HGX, H100_HGX, Machine

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "nvidia_driver"


def _play(tmp_path: Path, tasks: list[dict[str, object]],
          environment: dict[str, str] | None = None) -> PlaybookRun:
    play = [{"name": "nvidia_driver pieces", "hosts": "localhost", "gather_facts": False,
             "environment": environment or {},
             "tasks": [{"name": "Load the Fabric Manager variables",
                        "ansible.builtin.include_vars": str(ROLE / "vars" / "fabricmanager.yml")},
                       *tasks]}]
    return run_local_play(tmp_path, play)


def _fabric_check(tmp_path: Path, machine: Machine, *, fabric_done: bool,
                  fabric_manager: str, timeout: int = 5,
                  log: str | None = None) -> PlaybookRun:
    root = tmp_path / "root"
    (root / "var/lib/nvidia-stub").mkdir(parents=True)
    (root / "var/lib/nvidia-stub/gpus").write_text(machine.smi_gpus())
    devices = machine.build(tmp_path / "sysfs")
    (root / "var/lib/nvidia-stub/pci-devices").write_text(f"{devices}\n")
    if fabric_done:
        (root / "run/nvidia-fabricmanager").mkdir(parents=True)
        (root / "run/nvidia-fabricmanager/fabric-state").write_text("Completed\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\nexec {sys.executable} {STUBS / "nvidia-smi"} "$@"\n')
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho {fabric_manager}\n[ "{fabric_manager}" = active ]\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    smi_lines = machine.smi_gpus().splitlines()
    log_file = tmp_path / "fabricmanager.log"
    if log is not None:
        log_file.write_text(log)
    return _play(tmp_path, [{
        "name": "Check the fabric",
        "ansible.builtin.include_role": {"name": "nvidia_driver", "tasks_from": "fabric-state"},
        "vars": {"nvidia_driver_fabric_timeout": timeout,
                 "__nvidia_driver_fabricmanager_log": str(log_file),
                 "__nvidia_driver_smi": {"stdout_lines": smi_lines}},
    }], {"PATH": f"{bin_dir}:/usr/bin:/bin", "NVIDIA_STUB_ROOT": str(root)})


def test_hgx_a100_passes_with_fabric_manager_running_though_its_gpus_report_no_state(
        tmp_path: Path) -> None:
    run = _fabric_check(tmp_path, A100_HGX, fabric_done=True, fabric_manager="active")
    assert run.returncode == 0, run.explain()
    assert "Fabric Manager running; 8 GPU(s) before Hopper report no fabric state" in run.output


def test_hgx_a100_fails_when_fabric_manager_is_not_running(tmp_path: Path) -> None:
    run = _fabric_check(tmp_path, A100_HGX, fabric_done=False, fabric_manager="failed")
    assert run.returncode != 0
    assert "Fabric Manager is failed" in " ".join(run.output.split())


# Fabric Manager's own log as the real daemon writes it when its configuration is bad
# (tests/fixtures/aptrepo/stubs/nv-fabricmanager writes the same lines).
FAILED_LOG = """\
[Nov 02 2026 10:14:03] [INFO] [tid 1201] Fabric Manager version 580.126.16 is running
[Nov 02 2026 10:14:03] [ERROR] [tid 1201] invalid FABRIC_MODE value 9 in config file \
/usr/share/nvidia/nvswitch/fabricmanager.cfg
"""


@pytest.mark.timeout(240)  # the whole wait (300 s) would hit this: the play must not wait
def test_a_fabric_manager_that_is_not_running_fails_at_once_with_its_log(tmp_path: Path) -> None:
    """H100s still "In Progress" and the daemon failed: the play fails in the first round,
    naming the daemon's state and the last lines of its log, not after 300 s of waiting."""
    run = _fabric_check(tmp_path, H100_HGX, fabric_done=False, fabric_manager="failed",
                        timeout=300, log=FAILED_LOG)
    assert run.returncode != 0
    assert run.failed_task.endswith("Fail when Fabric Manager is not running, with the last lines"
                                    " of its log"), run.explain()
    flat = " ".join(run.output.split())
    assert "Fabric Manager is failed on localhost" in flat
    assert "invalid FABRIC_MODE value 9 in config file" in flat
    assert "In Progress/N/A" in flat


def test_hgx_h100_passes_once_the_fabric_is_completed(tmp_path: Path) -> None:
    run = _fabric_check(tmp_path, H100_HGX, fabric_done=True, fabric_manager="active")
    assert run.returncode == 0, run.explain()
    assert "NVLink fabric initialised on 8 GPU(s): State Completed, Status Success" in run.output


def _systemd_active_states() -> list[str]:
    """Every unit active state this machine's systemd defines (`systemctl --state=help`)."""
    listing = subprocess.run(["systemctl", "--state=help"], capture_output=True, text=True,
                             check=True).stdout
    section = listing.split("Available unit active states:", 1)[1].split("Available", 1)[0]
    return section.split()


# Running: `active`, and `reloading` (a running daemon rereading its configuration).
NOT_RUNNING = [state for state in _systemd_active_states() if state not in ("active", "reloading")]


@pytest.mark.parametrize("fabric_manager", [*NOT_RUNNING, ""])
def test_a_completed_fabric_does_not_pass_without_a_running_fabric_manager(
        tmp_path: Path, fabric_manager: str) -> None:
    """A GPU keeps "Completed" after Fabric Manager exits (until the GPU is reset): on a host
    whose Fabric Manager died, or no longer starts, the state is stale, and the play fails
    naming the daemon's state, whatever systemd calls it ("" : a unit systemd does not know)."""
    run = _fabric_check(tmp_path, H100_HGX, fabric_done=True, fabric_manager=fabric_manager)
    assert run.returncode != 0, run.explain()
    assert run.failed_task.endswith("Fail when Fabric Manager is not running, with the last lines"
                                    " of its log"), run.explain()
    flat = " ".join(run.output.split())
    assert f"Fabric Manager is {fabric_manager or 'not known to systemd'} on localhost" in flat
    assert "Completed/Success" in flat


def test_hgx_h100_in_progress_fails_naming_the_state(tmp_path: Path) -> None:
    run = _fabric_check(tmp_path, H100_HGX, fabric_done=False, fabric_manager="active")
    assert run.returncode != 0
    assert "In Progress/N/A" in run.output


def _packages(tmp_path: Path, branch: str) -> dict[str, list[str]]:
    out = tmp_path / f"packages-{branch}.json"
    run = _play(tmp_path, [{
        "name": "Write the package names",
        "ansible.builtin.copy": {
            "content": "{{ __nvidia_driver_fabricmanager_packages | to_json }}",
            "dest": str(out), "mode": "0644"},
        "vars": {"nvidia_driver_branch": branch},
    }])
    assert run.returncode == 0, run.explain()
    result: dict[str, list[str]] = json.loads(out.read_text())
    return result


def test_fabric_manager_is_named_by_branch_before_580_and_plainly_from_580(
        tmp_path: Path) -> None:
    assert _packages(tmp_path, "570") == {"Debian": ["nvidia-fabricmanager-570"],
                                          "RedHat": ["nvidia-fabric-manager"]}
    assert _packages(tmp_path, "580") == {"Debian": ["nvidia-fabricmanager"],
                                          "RedHat": ["nvidia-fabricmanager"]}


def _specs(tmp_path: Path, branch: str, version: str) -> dict[str, list[str]]:
    out = tmp_path / f"specs-{branch}.json"
    run = _play(tmp_path, [{
        "name": "Write the specs",
        "ansible.builtin.copy": {"content": "{{ __nvidia_driver_fabric_specs | to_json }}",
                                 "dest": str(out), "mode": "0644"},
        "vars": {"nvidia_driver_branch": branch, "__nvidia_driver_version": [version],
                 "__nvidia_driver_nvlink5": True},
    }])
    assert run.returncode == 0, run.explain()
    result: dict[str, list[str]] = json.loads(out.read_text())
    return result


def test_fabric_manager_and_nscq_are_asked_for_at_the_drivers_build_with_nvlsm_on_nvlink5(
        tmp_path: Path) -> None:
    """The specs the role installs, per OS family, as NVIDIA's driver containers write them
    (install.sh: nvidia-fabricmanager-570=570.148.08-1 libnvidia-nscq-570=570.148.08-1,
    `nvlsm infiniband-diags` on NVLink 5; the dnf containers: nvidia-fabric-manager-570.148.08
    libnvidia-nscq-570-570.148.08). NSCQ is named like Fabric Manager: by branch before 580."""
    assert _specs(tmp_path, "570", "570.148.08") == {
        "Debian": ["nvidia-fabricmanager-570=570.148.08-*", "libnvidia-nscq-570=570.148.08-*",
                   "libnvsdm-570=570.148.08-*", "nvidia-imex-570=570.148.08-*",
                   "nvlsm", "infiniband-diags"],
        "RedHat": ["nvidia-fabric-manager-570.148.08", "libnvidia-nscq-570-570.148.08",
                   "libnvsdm-570-570.148.08", "nvidia-imex-570-570.148.08", "nvlsm",
                   "infiniband-diags"]}
    assert _specs(tmp_path, "580", "580.126.16") == {
        "Debian": ["nvidia-fabricmanager=580.126.16-*", "libnvidia-nscq=580.126.16-*",
                   "libnvsdm=580.126.16-*", "nvidia-imex=580.126.16-*",
                   "nvlsm", "infiniband-diags"],
        "RedHat": ["nvidia-fabricmanager-580.126.16", "libnvidia-nscq-580.126.16",
                   "libnvsdm-580.126.16", "nvidia-imex-580.126.16", "nvlsm",
                   "infiniband-diags"]}


def test_libnvsdm_and_imex_only_on_nvlink5_and_held_with_the_driver(tmp_path: Path) -> None:
    """libnvsdm and IMEX belong to Blackwell's NVSwitch systems (NVLink 5): on an NVLink 4
    board (HGX H100/H200) the role asks for neither; on NVLink 5 they are among the packages
    pinned, held (apt) and locked (dnf) at the driver's build with Fabric Manager."""
    versioned: dict[str, object] = {}
    for nvlink5 in (False, True):
        out = tmp_path / f"versioned-{nvlink5}.json"
        run = _play(tmp_path, [{
            "name": "Write the packages held with the driver",
            "ansible.builtin.copy": {"content": "{{ __nvidia_driver_fabric_versioned | to_json }}",
                                     "dest": str(out), "mode": "0644"},
            "vars": {"nvidia_driver_branch": "590", "__nvidia_driver_nvlink5": nvlink5},
        }])
        assert run.returncode == 0, run.explain()
        versioned[str(nvlink5)] = json.loads(out.read_text())
    assert versioned["False"] == {"Debian": ["nvidia-fabricmanager", "libnvidia-nscq"],
                                  "RedHat": ["nvidia-fabricmanager", "libnvidia-nscq"]}
    assert versioned["True"] == {
        "Debian": ["nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm", "nvidia-imex"],
        "RedHat": ["nvidia-fabricmanager", "libnvidia-nscq", "libnvsdm", "nvidia-imex"]}


def test_the_ib_umad_module_comes_from_the_distributions_module_package(tmp_path: Path) -> None:
    """NVLink 5's ib_umad, where the running kernel lacks it (modinfo): Ubuntu ships it in
    linux-modules-extra-<kernel release>, which a server install does not always have;
    RHEL 9 in kernel-modules (its filter-modules.sh moves drivers/infiniband out of
    kernel-modules-core, keeping only ib_core, ib_cm, iw_cm and rdma_cm there), Debian in the
    image's own package."""
    found = {}
    for distribution, family in (("Ubuntu", "Debian"), ("Debian", "Debian"), ("Rocky", "RedHat")):
        out = tmp_path / f"ib-umad-{distribution}.txt"
        run = _play(tmp_path, [{
            "name": "Write the package",
            "ansible.builtin.copy": {"content": "{{ __nvidia_driver_ib_umad_package }}",
                                     "dest": str(out), "mode": "0644"},
            "vars": {"ansible_facts": {"distribution": distribution, "os_family": family,
                                       "kernel": "6.8.0-51-generic"}},
        }])
        assert run.returncode == 0, run.explain()
        found[distribution] = out.read_text()
    assert found == {"Ubuntu": "linux-modules-extra-6.8.0-51-generic",
                     "Debian": "linux-image-6.8.0-51-generic",
                     "Rocky": "kernel-modules-6.8.0-51-generic"}
