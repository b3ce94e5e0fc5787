"""The DCGM exporter's settings are checked before the role runs (meta/argument_specs.yml)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ansible.playbook import run_local_play


@pytest.mark.parametrize(("name", "value", "said"), [
    ("dcgm_exporter_network", "overlay", "must be one of: bridge, host, got: overlay"),
    ("dcgm_exporter_start_timeout", "soon", "dcgm_exporter_start_timeout"),
])
def test_a_bad_exporter_setting_is_refused_before_any_task(tmp_path: Path, name: str, value: str,
                                                           said: str) -> None:
    play = [{"name": "dcgm with a bad exporter setting", "hosts": "all", "gather_facts": False,
             "roles": [{"role": "dcgm", "dcgm_exporter": True, name: value}]}]
    run = run_local_play(tmp_path, play)
    flat = " ".join(run.output.split())
    assert run.returncode != 0
    assert said in flat, flat[-2000:]
    assert "Validating arguments against arg spec" in flat
    assert "Check that this role supports the host's OS family" not in flat  # nothing ran
