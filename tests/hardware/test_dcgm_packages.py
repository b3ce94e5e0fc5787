"""The dcgm role's decision (tasks/decide.yml): whether DCGM goes on, and for which CUDA major.

Run through Ansible on this machine against the nvidia-smi stub, built with the
CUDA version a driver branch reports (12.8 for 570, 13.0 for 580):
datacenter-gpu-manager-4-cuda13 needs a 580+ driver, so `dcgm_cuda_major: auto`
must follow the driver, not a fixed "12".
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.ansible.playbook import PlaybookRun, run_local_play
from tests.fixtures.aptrepo.catalog import STUBS
from tests.hardware.machines import H100_HGX


def _decide(tmp_path: Path, cuda: str, gpus: bool = True, installed: bool = True,
            **settings: Any) -> PlaybookRun:
    root = tmp_path / "root"
    (root / "var/lib/nvidia-stub").mkdir(parents=True)
    (root / "var/lib/nvidia-stub/gpus").write_text(H100_HGX.smi_gpus() if gpus else "")
    stub = (STUBS / "nvidia-smi").read_text()
    smi = tmp_path / "nvidia-smi"
    smi.write_text(stub.replace("@DRIVER_VERSION@", "580.95.05").replace("@CUDA_VERSION@", cuda)
                   .replace("#!/usr/bin/python3", f"#!{sys.executable}", 1))
    smi.chmod(0o755)
    if not installed:
        smi.unlink()
    play = [{"name": "dcgm's decision", "hosts": "localhost", "gather_facts": False,
             "environment": {"PATH": f"{tmp_path}:/usr/bin:/bin", "NVIDIA_STUB_ROOT": str(root)},
             "tasks": [
                 {"name": "Decide", "ansible.builtin.include_role": {
                     "name": "dcgm", "tasks_from": "decide"},
                  "vars": {"__dcgm_smi_path": str(smi), **settings}},
                 {"name": "Show the packages", "ansible.builtin.debug": {
                     "msg": ("active={{ __dcgm_active }}"
                             " packages={{ __dcgm_install_packages | join(',') }}")}}]}]
    return run_local_play(tmp_path, play)


def test_auto_follows_the_drivers_cuda_major(tmp_path: Path) -> None:
    for cuda, package in (("12.8", "datacenter-gpu-manager-4-cuda12"),
                          ("13.0", "datacenter-gpu-manager-4-cuda13")):
        run = _decide(tmp_path / cuda, cuda)
        assert run.returncode == 0, run.explain()
        assert f"packages={package}" in run.output, run.output[-3000:]


def test_an_explicit_major_wins(tmp_path: Path) -> None:
    run = _decide(tmp_path, "13.0", dcgm_cuda_major="12")
    assert run.returncode == 0, run.explain()
    assert "packages=datacenter-gpu-manager-4-cuda12" in run.output


def test_always_without_a_driver_asks_for_the_major_in_one_line(tmp_path: Path) -> None:
    run = _decide(tmp_path, "13.0", gpus=False, dcgm_enabled="always")
    assert run.returncode != 0
    said = " ".join(run.output.split())
    assert "dcgm_cuda_major is auto, and nvidia-smi on localhost reports no CUDA version" in said
    assert 'Fix: set dcgm_cuda_major: "12"' in said


def test_without_nvidia_smi_the_host_gets_no_dcgm(tmp_path: Path) -> None:
    """Check mode on a fresh host: no driver yet, so no nvidia-smi; decided without a failure."""
    run = _decide(tmp_path, "13.0", installed=False, dcgm_cuda_major="13")
    assert run.returncode == 0, run.explain()
    assert "active=False" in run.output, run.output[-3000:]
