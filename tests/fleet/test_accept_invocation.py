"""accept.yml as an operator runs it: the docker command it gives the battery, and the report
it asks for, on this machine with `docker` and `journalctl` stood in by scripts on PATH.

The stand-in `docker run` logs its arguments, then does what the container would: it runs
the real `workloads accept` (the errors check) with the play's bind mount applied (the
mounted file's host path where the command says /kernel.log); `docker cp` copies the
record out. The stand-in `journalctl` prints a healthy boot's kernel lines in the driver's
formats. What must hold: the play saves this boot's log on the host and mounts it
read-only with `--kernel-log /kernel.log`, adding no capability and no device; the
battery's kernel-log row passes; the play writes the hosts its pattern names into
`<run>/inventory.txt` (--limit or not) and passes it to the report, which fails the
inventory host that has no record.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.playbook import REPO, PlaybookRun, run_playbook
from tests.workloads import kernel_log_fixture as klog

pytestmark = pytest.mark.slow

DOCKER = '''#!{python}
"""docker, stood in: logs argv; `run` runs the battery with the bind mounts applied."""
import json, os, shutil, subprocess, sys
args = sys.argv[1:]
with open(os.environ["STUB_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
results = os.environ["STUB_RESULTS"]
if args[0] == "run":
    mounts, rest, i = {{}}, args[1:], 0
    while rest[i].startswith("-"):
        if rest[i] in ("--volume", "-v"):
            source, target, *_ = rest[i + 1].split(":")
            mounts[target] = source
        i += 1 if rest[i].startswith("--gpus=") else 2
    command = [mounts.get(a, a).replace("/results/", results + "/") for a in rest[i + 1:]]
    sys.exit(subprocess.run([sys.executable, "-m", "workloads", *command]).returncode)
if args[0] == "cp":
    name = args[1].split(":", 1)[1].rsplit("/", 1)[1]
    shutil.copy(os.path.join(results, name), args[2])
'''


@pytest.fixture(scope="module")
def played(tmp_path_factory: pytest.TempPathFactory) -> tuple[PlaybookRun, Path, Path]:
    work = tmp_path_factory.mktemp("accept")
    stubs = work / "bin"
    stubs.mkdir()
    (stubs / "docker").write_text(DOCKER.format(python=sys.executable))
    journal = klog.write(work / "journal.txt", klog.noise(1.0, 300))
    (stubs / "journalctl").write_text(f"#!/bin/sh\nexec cat {journal}\n")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    (work / "results-in-container").mkdir()
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = work / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {
        "hosts": {"localhost": local},
        "children": {"gpu_hosts": {"hosts": {"gpu-a": local, "gpu-b": local}}}}}))
    extra = work / "vars.yml"
    extra.write_text(yaml.safe_dump({
        "acceptance_become": False, "acceptance_run": "r1", "acceptance_quick": True,
        "acceptance_only": ["errors"], "acceptance_results_dir": str(work / "results"),
        "acceptance_baselines_dir": str(work / "baselines"),
        "acceptance_remote_dir": str(work / "remote")}))
    log = work / "docker.log"
    # gpu-b is in the inventory and left out of this run (--limit): it leaves no record.
    run = run_playbook(inventory, [extra], work / "play.log", "--limit", "gpu-a,localhost",
                       playbook="accept.yml", vault=None, timeout=600,
                       search_path=f"{stubs}:{os.environ['PATH']}",
                       env={"STUB_LOG": str(log), "PYTHONPATH": str(REPO),
                            "STUB_RESULTS": str(work / "results-in-container")})
    return run, work, log


def _docker_runs(log: Path) -> list[list[str]]:
    return [a for a in map(json.loads, log.read_text().splitlines()) if a[0] == "run"]


def test_the_battery_gets_the_saved_log_read_only_and_nothing_more(
        played: tuple[PlaybookRun, Path, Path]) -> None:
    run, work, log = played
    assert run.returncode == 0, run.explain()
    [argv] = _docker_runs(log)
    saved = work / "remote" / "kernel.log"
    assert f"{saved}:/kernel.log:ro" in argv and argv[argv.index(f"{saved}:/kernel.log:ro") - 1] \
        == "--volume"
    assert argv[-2:] == ["--kernel-log", "/kernel.log"]
    assert not any(a.startswith(("--cap-add", "--privileged", "--device")) or "kmsg" in a
                   for a in argv), argv
    assert saved.read_text() == (work / "journal.txt").read_text()


def test_the_errors_row_passes_on_a_healthy_host_run_this_way(
        played: tuple[PlaybookRun, Path, Path]) -> None:
    _, work, _ = played
    record: dict[str, Any] = json.loads((work / "results" / "r1" / "gpu-a.json").read_text())
    [row] = [f for f in record["findings"] if f["item"] == "kernel log"]
    assert row["verdict"] == "pass", row
    assert row["details"]["lines"] == 300


def test_the_report_is_given_the_inventory_and_fails_the_host_with_no_record(
        played: tuple[PlaybookRun, Path, Path]) -> None:
    run, work, _ = played
    run_dir = work / "results" / "r1"
    assert (run_dir / "inventory.txt").read_text().split() == ["gpu-a", "gpu-b"]
    assert f"- --inventory\n    - {run_dir}/inventory.txt" in run.log  # passed, not defaulted
    report = json.loads((run_dir / "report" / "fleet.json").read_text())
    verdicts = {h["host"]: h for h in report["hosts"]}
    assert verdicts["gpu-b"]["verdict"] == "fail"
    assert verdicts["gpu-b"]["reasons"][0].startswith(
        "no record: the inventory lists it and r1/ has no gpu-b.json")
    assert verdicts["gpu-a"]["verdict"] == "pass", verdicts["gpu-a"]
