"""The generated array script: no value can break out of its line, every shell word is quoted.

No cluster is needed: the script is written by the real ``ArrayJob`` and, where it
matters, run by bash with the variables an array task has.
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from workloads.errors import WorkloadError
from workloads.sweep.expand import expand
from workloads.sweep.slurm import ArrayJob, ArrayOptions
from workloads.sweep.spec import load_spec

SPEC = {"workload": "style", "defaults": {"weights": "random", "width": 48, "iterations": 1},
        "vary": {"learning_rate": [1, 10]}}


def job(spec_path: Path, directory: Path, options: ArrayOptions | None = None) -> ArrayJob:
    spec_path.write_text(yaml.safe_dump(SPEC))
    spec = load_spec(spec_path)
    return ArrayJob(spec, directory, expand(spec), "run-id", 0, options or ArrayOptions(),
                    directory.parent)


def options(**given: object) -> ArrayOptions:
    args = {"gres": None, "launcher": None, "sbatch_arg": [], "array_parallel": None,
            "wait": False, "run_timeout": None, **given}
    return ArrayOptions.from_args(argparse.Namespace(**args))


def test_a_spec_path_with_a_newline_is_refused_before_any_file_is_written(tmp_path: Path) -> None:
    spec_path = tmp_path / "study\ntouch pwned\n.yaml"
    array = job(spec_path, tmp_path / "d")
    with pytest.raises(WorkloadError, match=r"the spec path .* holds a control character"):
        array.write()
    assert not (tmp_path / "d" / "slurm").exists()


@pytest.mark.parametrize("gres", ["gpu:1\ntouch /tmp/x", "gpu:1;id", "gpu:1 --wrap=id"])
def test_a_gres_that_is_not_a_resource_list_is_refused(gres: str) -> None:
    with pytest.raises(WorkloadError, match="--gres"):
        options(gres=gres)


@pytest.mark.parametrize("arg", ["--partition=gpu\rid", "--comment=a\x1bb", "--partition=gpu\n"])
def test_an_sbatch_arg_with_a_control_character_is_refused(arg: str) -> None:
    with pytest.raises(WorkloadError, match="control character"):
        options(sbatch_arg=[arg])


def test_a_directory_with_a_quote_is_refused_for_the_sbatch_lines(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="#SBATCH lines cannot hold"):
        job(tmp_path / "s.yaml", tmp_path / "it's").write()


def test_shell_words_are_quoted_when_the_task_runs(tmp_path: Path) -> None:
    """A spec named ``$(touch${IFS}pwned)``: bash passes the name on, runs nothing."""
    spec_path = tmp_path / "s$(touch${IFS}pwned)`id`.yaml"
    array = job(spec_path, tmp_path / "d", options(launcher="/bin/echo", gres="gpu:a100:2"))
    script = array.write()
    text = script.read_text()
    assert "#SBATCH --gres=gpu:a100:2\n" in text
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "1"}
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True,
                         text=True, check=False, timeout=60)
    assert ran.returncode == 0, ran.stderr
    argv = ran.stdout.split()
    assert argv[3] == str(spec_path.resolve())  # -m workloads sweep SPEC ...
    assert argv[-1] == array.todo[1].pset_id
    assert not (tmp_path / "pwned").exists()
