"""gpu_validate's DCGM verdict (tasks/dcgm.yml), run through Ansible against the dcgmi stub.

The stub answers `dcgmi diag -r 1` as DCGM 4 does (one Pass/Warn/Fail per row);
a test picks the row that warns or fails. The verdict must pass a clean run,
name every warned check while still passing, and fail the play naming the
failed check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.ansible.playbook import PlaybookRun, run_local_play
from tests.fixtures.aptrepo.catalog import STUBS
from tests.hardware.machines import H100_HGX


def _diagnose(tmp_path: Path, warn: str = "", fail: str = "") -> PlaybookRun:
    root = tmp_path / "root"
    (root / "var/lib/nvidia-stub").mkdir(parents=True)
    (root / "var/lib/nvidia-stub/gpus").write_text(H100_HGX.smi_gpus())
    (root / "run/nvidia-dcgm").mkdir(parents=True)
    (root / "run/nvidia-dcgm/hostengine").write_text("running\n")
    for name, check in (("dcgm-warn", warn), ("dcgm-fail", fail)):
        if check:
            (root / "var/lib/nvidia-stub" / name).write_text(f"{check}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dcgmi", "nvidia-smi"):
        wrapper = bin_dir / tool
        wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} {STUBS / tool} "$@"\n')
        wrapper.chmod(0o755)
    play = [{"name": "gpu_validate's DCGM diagnostic", "hosts": "localhost",
             "gather_facts": False,
             "environment": {"PATH": f"{bin_dir}:/usr/bin:/bin", "NVIDIA_STUB_ROOT": str(root)},
             "tasks": [{"name": "Diagnose",
                        "ansible.builtin.include_role": {"name": "gpu_validate",
                                                         "tasks_from": "dcgm"},
                        "vars": {"__gpu_validate_dcgm_tool_paths": [
                            str(bin_dir / "dcgmi"), str(bin_dir / "nvidia-smi")]}}]}]
    return run_local_play(tmp_path, play)


def _verdict(run: PlaybookRun) -> str:
    said = " ".join(run.output.split())
    marker = "DCGM diagnostic (dcgmi diag -r 1) on localhost: "
    assert marker in said, run.explain()
    found = re.match(r"(.+?)[\"']", said.split(marker, 1)[1])
    assert found, said
    return found.group(1)


def test_a_clean_diagnostic_passes(tmp_path: Path) -> None:
    run = _diagnose(tmp_path)
    assert run.returncode == 0, run.explain()
    assert _verdict(run) == "PASS"


def test_warned_checks_pass_and_are_named(tmp_path: Path) -> None:
    run = _diagnose(tmp_path, warn="Page Retirement/Row Remap")
    assert run.returncode == 0, run.explain()
    assert _verdict(run) == "PASS with warnings (Page Retirement/Row Remap)"


@pytest.mark.parametrize("warn", ["", "Inforom"])
def test_a_failed_check_fails_the_play_naming_it(tmp_path: Path, warn: str) -> None:
    run = _diagnose(tmp_path, warn=warn, fail="Persistence Mode")
    assert run.returncode != 0
    failure = " ".join(run.output.split())
    assert "dcgmi diag -r 1 on localhost: FAIL (Persistence Mode)" in failure, run.explain()
