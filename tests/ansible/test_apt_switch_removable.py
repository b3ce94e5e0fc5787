"""What an apt driver switch may remove unnamed (vars/main.yml, __nvidia_driver_switch_removable).

tasks/setup-Debian.yml stops a switch whose simulation removes anything outside this set.
The set is the old branch's and the other flavour's driver packages (the nvidia_other_branch
filter) and NVIDIA's pinning package of another branch, except the driver components the
play does not install on the host and so would not bring back at the new build: IMEX,
libnvsdm, every -dev package, and Fabric Manager and NSCQ where there is no NVSwitch; plus
what the site names in nvidia_driver_allow_removal. Evaluated by Ansible itself (the role's
vars file, one local play), over a family of hosts: with and without NVSwitches, NVLink 5,
and a site's allowance.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.ansible.playbook import ANSIBLE_DIR, run_local_play

ROLE = ANSIBLE_DIR / "roles" / "nvidia_driver"
OLD = "580.126.16-1ubuntu1"
# A 580 host as NVIDIA's guide and a site leave it: the driver, the components, a site package.
INSTALLED = {
    "nvidia-utils-580": OLD, "libnvidia-compute-580": OLD, "nvidia-headless-580-open": OLD,
    "nvidia-fabricmanager": OLD, "libnvidia-nscq": OLD, "nvidia-fabricmanager-dev": OLD,
    "nvidia-imex": OLD, "libnvsdm": OLD, "nvidia-driver-pinning-580": "580-2ubuntu1",
    "site-gpu-agent": "1.0", "nvidia-container-toolkit": "1.17.8-1",
}
DRIVER = ["libnvidia-compute-580", "nvidia-headless-580-open", "nvidia-utils-580"]


def _removable(tmp_path: Path, fabric: bool, nvlink5: bool, allow: list[str]) -> list[str]:
    out = tmp_path / "removable.json"
    packages = {name: [{"name": name, "version": version, "arch": "amd64", "source": "apt"}]
                for name, version in INSTALLED.items()}
    run = run_local_play(tmp_path, [{
        "name": "The switch's removable set", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_facts": {"packages": packages}, "nvidia_driver_branch": "590",
                 "nvidia_driver_version": "", "nvidia_driver_allow_removal": allow,
                 "__nvidia_driver_fabric": fabric, "__nvidia_driver_nvlink5": nvlink5,
                 "__nvidia_driver_other_flavour": [],
                 "__nvidia_driver_other_branch": "{{ __nvidia_driver_other_branch_query }}"},
        "tasks": [
            {"name": "Load the role's variables",
             "ansible.builtin.include_vars": str(ROLE / "vars" / "main.yml")},
            {"name": "Write the set",
             "ansible.builtin.copy": {
                 "content": "{{ __nvidia_driver_switch_removable | sort | to_json }}",
                 "dest": str(out), "mode": "0644"}}]}])
    assert run.returncode == 0, run.explain()
    found: list[str] = json.loads(out.read_text())
    return found


@pytest.mark.parametrize(("fabric", "nvlink5", "allow", "components"), [
    (False, False, [], []),
    (True, False, [], ["libnvidia-nscq", "nvidia-fabricmanager"]),
    (True, True, [], ["libnvidia-nscq", "libnvsdm", "nvidia-fabricmanager", "nvidia-imex"]),
    (False, False, ["site-gpu-agent", "nvidia-imex"], ["nvidia-imex", "site-gpu-agent"]),
])
def test_only_the_driver_and_the_components_the_play_brings_back_may_go(
        tmp_path: Path, fabric: bool, nvlink5: bool, allow: list[str],
        components: list[str]) -> None:
    assert _removable(tmp_path, fabric, nvlink5, allow) == sorted(
        [*DRIVER, "nvidia-driver-pinning-580", *components])
