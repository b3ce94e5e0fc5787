"""ansible/library/probe_commands.py: several read-only questions in one module run.

The roles ask the host several questions with one probe_commands run and judge each
answer with their own fail or assert task, so a probe that fails must still stop the play
with a message naming the command: here the nvidia_container_toolkit role's verify step
(nvidia-ctk's version, Docker's runtimes) against stubs of both on this machine.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.ansible.playbook import run_local_play

VERSION = "1.17.8-1"


def _stub(folder: Path, name: str, script: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _stubs(tmp_path: Path, docker: str | None, ctk: str | None = None) -> str:
    folder = tmp_path / "bin"
    folder.mkdir()
    if ctk is not None:
        _stub(folder, "nvidia-ctk", ctk)
    if docker is not None:
        _stub(folder, "docker", docker)
    return f"{folder}:/usr/bin:/bin"


def _verify(tmp_path: Path, search_path: str) -> tuple[int, str]:
    play = [{"name": "Verify", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The role's verify step", "ansible.builtin.include_role": {
            "name": "nvidia_container_toolkit", "tasks_from": "verify"},
         "vars": {"nvidia_container_toolkit_version": VERSION}}]}]
    run = run_local_play(tmp_path, play, search_path=search_path)
    return run.returncode, run.output


CTK = 'echo "NVIDIA Container Toolkit CLI version 1.17.8"\n'
RUNTIMES = ("echo '" + json.dumps({"nvidia": {"path": "nvidia-container-runtime"}, "runc": {}})
            + "'\n")


def test_both_answers_pass(tmp_path: Path) -> None:
    code, output = _verify(tmp_path, _stubs(tmp_path, RUNTIMES, CTK))
    assert code == 0, output
    assert "Docker runtimes: nvidia, runc" in output


def test_a_docker_that_does_not_answer_stops_the_play_naming_it(tmp_path: Path) -> None:
    docker = ("echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock' >&2\n"
              "exit 1\n")
    code, output = _verify(tmp_path, _stubs(tmp_path, docker, CTK))
    assert code != 0
    assert "`docker info --format {{ json .Runtimes }}` exited 1: Cannot connect to the Docker" \
        in " ".join(output.split()), output


def test_a_missing_nvidia_ctk_stops_the_play_naming_it(tmp_path: Path) -> None:
    code, output = _verify(tmp_path, _stubs(tmp_path, RUNTIMES, None))
    assert code != 0
    assert "`nvidia-ctk --version` is not installed" in " ".join(output.split()), output


def test_another_toolkit_version_still_fails_its_check(tmp_path: Path) -> None:
    code, output = _verify(tmp_path, _stubs(tmp_path, RUNTIMES, 'echo "version 1.16.2"\n'))
    assert code != 0
    assert "expected 1.17.8-1" in " ".join(output.split()), output
