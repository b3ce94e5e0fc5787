"""The nvidia-smi and dcgmi stubs say what the real tools say on each machine.

The roles' own patterns (the Fabric section in nvidia_driver's
vars/fabricmanager.yml, a failed check in gpu_validate's vars/main.yml) are
applied to the stubs' output, so a stub and a role that drift apart fail
here, in a second, rather than in the HGX converge.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures import persistenced_units
from tests.fixtures.aptrepo.catalog import STUBS, ubuntu_signed_module_packages
from tests.hardware.machines import H100_HGX, H100_PCIE, Machine

ROLES = Path(__file__).resolve().parents[2] / "ansible" / "roles"
FABRIC = re.compile(yaml.safe_load((ROLES / "nvidia_driver/vars/fabricmanager.yml").read_text())
                    ["__nvidia_driver_fabric_pattern"])
DCGM_FAIL = re.compile(yaml.safe_load((ROLES / "gpu_validate/vars/main.yml").read_text())
                       ["__gpu_validate_dcgm_fail_pattern"])


def _stub_root(tmp_path: Path, machine: Machine) -> Path:
    root = tmp_path / "root"
    (root / "var/lib/nvidia-stub").mkdir(parents=True)
    (root / "var/lib/nvidia-stub/gpus").write_text(machine.smi_gpus())
    devices = machine.build(tmp_path / "sysfs")
    (root / "var/lib/nvidia-stub/pci-devices").write_text(f"{devices}\n")
    return root


def _run(stub: str, root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(STUBS / stub), *args], capture_output=True,
                          text=True, check=False, env={"NVIDIA_STUB_ROOT": str(root)})


def _fabric(root: Path) -> list[str]:
    return ["/".join(match) for match in FABRIC.findall(_run("nvidia-smi", root, "-q").stdout)]


def test_hgx_fabric_is_in_progress_until_fabric_manager_runs(tmp_path: Path) -> None:
    root = _stub_root(tmp_path, H100_HGX)
    assert _fabric(root) == ["In Progress/N/A"] * 8
    (root / "run/nvidia-fabricmanager").mkdir(parents=True)
    (root / "run/nvidia-fabricmanager/fabric-state").write_text("Completed\n")
    assert _fabric(root) == ["Completed/Success"] * 8


def test_a_pcie_host_has_no_fabric(tmp_path: Path) -> None:
    assert _fabric(_stub_root(tmp_path, H100_PCIE)) == ["N/A/N/A"] * 2


@pytest.mark.parametrize(("failing", "rc"), [("", 0), ("Inforom", 226)])
def test_dcgmi_diag_reports_each_check(tmp_path: Path, failing: str, rc: int) -> None:
    root = _stub_root(tmp_path, H100_HGX)
    assert _run("dcgmi", root, "diag", "-r", "1").returncode == 255  # no host engine yet
    (root / "run/nvidia-dcgm").mkdir(parents=True)
    (root / "run/nvidia-dcgm/hostengine").write_text("running\n")
    if failing:
        (root / "var/lib/nvidia-stub/dcgm-fail").write_text(failing)
    result = _run("dcgmi", root, "diag", "-r", "1")
    assert result.returncode == rc
    assert "Successfully ran diagnostic for group." in result.stdout
    assert DCGM_FAIL.findall(result.stdout) == (
        [failing] if failing else [])


def _smi_on_path(tmp_path: Path, driver: str) -> Path:
    """The nvidia-smi stub as its package installs it, for driver version `driver`."""
    bin_dir = tmp_path / f"bin-{driver}"
    bin_dir.mkdir()
    text = (STUBS / "nvidia-smi").read_text()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(text.replace("@DRIVER_VERSION@", driver).replace("@CUDA_VERSION@", "12.8"))
    smi.chmod(0o755)
    return bin_dir


def test_nvidia_ctk_cdi_spec_lists_each_gpu_and_follows_the_driver(tmp_path: Path) -> None:
    root = _stub_root(tmp_path, H100_PCIE)
    (root / "etc/cdi").mkdir(parents=True)
    specs = []
    for driver in ("570.148.08", "575.57.08"):
        env = {"NVIDIA_STUB_ROOT": str(root),
               "PATH": f"{_smi_on_path(tmp_path, driver)}:/usr/bin:/bin"}
        spec = root / "etc/cdi/nvidia.yaml"
        subprocess.run([sys.executable, str(STUBS / "nvidia-ctk"), "cdi", "generate",
                        f"--output={spec}"], env=env, check=True, capture_output=True)
        specs.append(spec.read_text())
        listed = subprocess.run([sys.executable, str(STUBS / "nvidia-ctk"), "cdi", "list"],
                                env=env, check=True, capture_output=True, text=True).stdout
        assert listed.split()[:2] == ["nvidia.com/gpu=0",
                                      "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000000"]
        assert "nvidia.com/gpu=all" in listed.split()
    assert "libcuda.so.570.148.08" in specs[0] and "libcuda.so.575.57.08" in specs[1]


def test_nvidia_ctk_configures_containerd_once(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
    for _ in range(2):
        subprocess.run([sys.executable, str(STUBS / "nvidia-ctk"), "runtime", "configure",
                        "--runtime=containerd", f"--config={config}"], check=True,
                       capture_output=True)
    text = config.read_text()
    assert text.startswith('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n')
    assert text.count("runtimes.nvidia]") == 1


@pytest.mark.parametrize("flavour", ["open", "proprietary"])
def test_ubuntu_signed_module_stubs_carry_the_names_the_role_installs(flavour: str) -> None:
    """The Secure Boot path's package names (vars/secureboot.yml) exist in the stub catalogue."""
    names = {package.name for package in ubuntu_signed_module_packages(
        "580", "6.8.0-51-generic", metas=("generic", "generic-hwe-24.04"))}
    secureboot = yaml.safe_load((ROLES / "nvidia_driver/vars/secureboot.yml").read_text())
    variant = secureboot["__nvidia_driver_ubuntu_signed_variant"][flavour]
    wanted = {template.replace("{{ nvidia_driver_branch }}", "580")
              for template in secureboot["__nvidia_driver_ubuntu_signed_userspace"][flavour]}
    # What the role adds: the flavour meta's module package and the kernel's own.
    wanted |= {f"linux-modules-nvidia-580-{variant}-{name}"
               for name in ("generic-hwe-24.04", "6.8.0-51-generic")}
    assert wanted <= names, wanted - names
    assert "linux-objects-nvidia-580-server-open-6.8.0-51-generic" in names


# --- nvidia-persistenced: persistence mode as each vendor's unit starts it ------------

def _persistenced_filter() -> Callable[[str], dict[str, Any]]:
    spec = importlib.util.spec_from_file_location(
        "persistenced_unit", ROLES / "nvidia_driver/filter_plugins/persistenced_unit.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Callable[[str], dict[str, Any]] = module.persistenced_unit
    return found


def _persistence(root: Path) -> list[str]:
    """Each GPU's persistence mode, as an operator reads it: --query-gpu and -q agree."""
    query = _run("nvidia-smi", root, "--query-gpu=persistence_mode", "--format=csv,noheader")
    full = [line.split(":")[1].strip() for line in _run("nvidia-smi", root, "-q").stdout
            .splitlines() if "Persistence Mode" in line]
    assert query.stdout.split() == full, (query.stdout, full)
    return full


def _start_daemon(root: Path, exec_start: str, path: str | None = None) -> int:
    """Run the unit's ExecStart with the stub as the binary, as systemd does (Type=forking)."""
    words = shlex.split(exec_start)
    assert words[0] == "/usr/bin/nvidia-persistenced", exec_start
    started = subprocess.run(["sh", str(STUBS / "nvidia-persistenced"), *words[1:]],
                             env={"NVIDIA_STUB_ROOT": str(root),
                                  "PATH": path or os.environ["PATH"]},
                             capture_output=True, text=True, timeout=10, check=False)
    assert started.returncode == 0, started.stderr  # the parent returns once the child runs
    return int((root / "var/run/nvidia-persistenced/nvidia-persistenced.pid").read_text())


def _stop_daemon(root: Path, pid: int) -> None:
    """SIGTERM, as systemctl stop sends it; the daemon is gone when its PID file is."""
    os.kill(pid, signal.SIGTERM)
    pidfile = root / "var/run/nvidia-persistenced/nvidia-persistenced.pid"
    deadline = time.monotonic() + 5
    while pidfile.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pidfile.exists(), "the daemon did not stop on SIGTERM"


@pytest.mark.parametrize(("unit", "on_at_start"), [
    pytest.param(persistenced_units.UBUNTU, False, id="ubuntu"),
    pytest.param(persistenced_units.DEBIAN, True, id="debian"),
    pytest.param(persistenced_units.EL9, True, id="el9"),
])
def test_persistenced_sets_persistence_as_its_unit_starts_it(
        tmp_path: Path, unit: str, on_at_start: bool) -> None:
    """The vendor's ExecStart, then the role's drop-in command where it writes one; then stop."""
    root = _stub_root(tmp_path, H100_PCIE)
    read = _persistenced_filter()(unit)
    assert read["persistence_off"] is not on_at_start
    pid = _start_daemon(root, read["exec_start"][-1])
    try:
        assert _persistence(root) == ["Enabled" if on_at_start else "Disabled"] * 2
        assert "All done." in _run("nvidia-smi", root, "-pm", "1").stdout
        assert _persistence(root) == ["Enabled"] * 2
    finally:
        _stop_daemon(root, pid)
    # The daemon turned persistence off for every GPU when it stopped.
    assert _persistence(root) == ["Disabled"] * 2
    pid = _start_daemon(root, read["exec_start_on"][-1])
    try:
        assert _persistence(root) == ["Enabled"] * 2
    finally:
        _stop_daemon(root, pid)


def test_persistence_goes_off_even_when_nothing_forked_after_the_sigterm_runs(
        tmp_path: Path) -> None:
    """systemctl stop: SIGTERM to the unit's cgroup, and again once the main process exits.

    A process the daemon forks on its way out can be killed before it runs. Here every `rm`
    does nothing (as if killed at once): persistence mode must still go off, because the
    daemon turns it off itself, as the real one does. Before, the stub removed its state file
    with `rm`, and a GPU could read Enabled long after the stop (test_site.py saw it).
    """
    root = _stub_root(tmp_path, H100_PCIE)
    killed = tmp_path / "killed-at-once"
    killed.mkdir()
    (killed / "rm").write_text("#!/bin/sh\nexit 0\n")
    (killed / "rm").chmod(0o755)
    pid = _start_daemon(root, "/usr/bin/nvidia-persistenced --persistence-mode",
                        path=f"{killed}:{os.environ['PATH']}")
    assert _persistence(root) == ["Enabled"] * 2
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert _persistence(root) == ["Disabled"] * 2
