"""run|scale|monitor drive the Docker engine from the host; inside an image they say so."""

from __future__ import annotations

import pytest

from workloads.cli import HOST_COMMANDS, main


@pytest.mark.parametrize("command", HOST_COMMANDS)
def test_in_an_image_a_host_command_is_one_line_and_exit_2(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WORKLOADS_HOST_COMMANDS", "0")
    assert main([command, "--gpus", "0", "some/image", "--", "check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert (f"workloads {command}: error: `workloads {command}` drives the host's Docker "
            "engine") in err
    assert "scripts/bootstrap.sh cpu, then .venv/bin/workloads" in err


def test_on_the_host_the_real_command_parses_its_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("WORKLOADS_HOST_COMMANDS", raising=False)
    with pytest.raises(SystemExit) as done:
        main(["run", "--help"])
    assert done.value.code == 0
    assert "--gpus" in capsys.readouterr().out
