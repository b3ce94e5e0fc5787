"""`ansible-playbook accept.yml` against a stand-in fleet, and its report in a real browser.

Five hosts, each a container of the project's `cpu` image (the battery's CPU code path,
the venv runtime): three healthy; `fleet-slow` confined to half of one of the machine's
CPUs (`--cpuset-cpus` and a CFS quota, `--cpus 0.3`: a host with a seventh of its
compute), so its compute checks come out far below its siblings' (at about a fifth of
them: more than 30 % below its group, a `fail`); `fleet-broken`, whose `workloads` is gone,
cannot run the battery at all. The play must finish the other hosts, name the slow host
`fail` with the checks that are slow, name the broken host `fail` with its reason, and the
HTML report must show exactly that in Chromium (read from the page; a screenshot is kept
in results/).

Marked `measures`: the batteries run one host at a time (`forks=1`) after every other test
of the session, so the healthy hosts are not measured against the suite's own load.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.playbook import REPO, PlaybookRun, run_playbook
from tests.images.fixtures import cpu_image

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.measures]

__all__ = ["cpu_image"]

HEALTHY = ("fleet-a", "fleet-b", "fleet-c")
SLOW = "fleet-slow"
BROKEN = "fleet-broken"
RESULTS = REPO / "results"


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def fleet_run(cpu_image: str,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PlaybookRun, Path]]:
    work = tmp_path_factory.mktemp("fleet")
    suffix = uuid.uuid4().hex[:8]
    containers = {}
    cpus = os.sched_getaffinity(0)
    try:
        for host in (*HEALTHY, SLOW, BROKEN):
            name = f"tfhost-{host}-{suffix}"
            options = ["--cpuset-cpus", str(min(cpus)), "--cpus", "0.3"] if host == SLOW else []
            _docker("run", "-d", "--name", name, "--network", "none", *options,
                    "--entrypoint", "sleep", cpu_image, "infinity")
            containers[host] = name
        _docker("exec", "-u", "0", containers[BROKEN], "rm", "/opt/venv/bin/workloads")
        inventory = work / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {"children": {"fleet": {"hosts": {
            host: {"ansible_connection": "community.docker.docker", "ansible_host": name,
                   "ansible_python_interpreter": "/usr/bin/python3",
                   "acceptance_expected_gpus": 0}  # CPU stand-ins: the inventory says none
            for host, name in containers.items()}}}}}))
        results = work / "acceptance"
        run = run_playbook(
            inventory, [], work / "accept.log", "-e", "acceptance_hosts=fleet",
            "-e", "acceptance_become=false", "-e", "acceptance_runtime=venv",
            "-e", "acceptance_venv=/opt/venv", "-e", "acceptance_quick=true",
            "-e", f"acceptance_results_dir={results}", "-e", "acceptance_run=ci",
            "--forks", "1", playbook="accept.yml", vault=None, timeout=900)
        report = results / "ci" / "report"
        if report.is_dir():  # kept for a person to read after the run (results/ is ignored by git)
            shutil.copytree(report, RESULTS / "fleet-report", dirs_exist_ok=True)
        yield run, results / "ci"
    finally:
        for name in containers.values():
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_the_play_finishes_every_host_and_records_the_broken_one(
        fleet_run: tuple[PlaybookRun, Path]) -> None:
    run, directory = fleet_run
    assert run.returncode == 0, run.explain()
    assert sorted(p.stem for p in directory.glob("*.json")) == sorted((*HEALTHY, SLOW, BROKEN))
    for host in (*HEALTHY, SLOW):  # the inventory's GPU count, written into each record
        fetched = json.loads((directory / f"{host}.json").read_text())
        assert fetched["inventory"] == {"expected_gpus": 0} and fetched["status"] == "done"
    report = json.loads((directory / "report" / "fleet.json").read_text())
    passing = sorted(h["host"] for h in report["hosts"] if h["verdict"] == "pass")
    baselines = directory.parent / "baselines"  # the passing hosts' records, as fetched
    assert sorted(p.stem for p in baselines.glob("*.json")) == passing
    for host in passing:
        fetched = (directory / f"{host}.json").read_bytes()
        assert (baselines / f"{host}.json").read_bytes() == fetched
    broken = json.loads((directory / f"{BROKEN}.json").read_text())
    assert broken["status"] == "error"
    assert "/opt/venv/bin/workloads" in broken["error"]
    assert f"fail: {BROKEN}" in run.output, run.explain()


def test_the_slow_host_fails_for_its_compute_checks(fleet_run: tuple[PlaybookRun, Path]) -> None:
    _, directory = fleet_run
    report = json.loads((directory / "report" / "fleet.json").read_text())
    verdicts = {h["host"]: h for h in report["hosts"]}
    figures = "\n".join(f"{f['host']} {f['check']} {f['value']:.4g} {f['outlier']}"
                        for f in report["figures"])
    assert verdicts[SLOW]["verdict"] == "fail", f"{verdicts[SLOW]}\n{figures}"
    assert any("below its group" in r for r in verdicts[SLOW]["reasons"]), verdicts[SLOW]
    slow_checks = {f["check"].split()[0] for f in report["figures"]
                   if f["host"] == SLOW and f["outlier"]}
    assert {"matmul", "training"} <= slow_checks, f"{verdicts[SLOW]}\n{figures}"
    for host in HEALTHY:
        # The battery warns about other load on a busy machine: a condition, not the host.
        assert _beyond_load(verdicts[host]["reasons"]) == [], f"{verdicts[host]}\n{figures}"
    assert verdicts[BROKEN]["verdict"] == "fail"


def _beyond_load(reasons: list[str]) -> list[str]:
    return [r for r in reasons if not r.startswith("warn: host other load")]


def test_the_report_shows_it_in_chromium(fleet_run: tuple[PlaybookRun, Path], page: Any) -> None:
    _, directory = fleet_run
    report = json.loads((directory / "report" / "fleet.json").read_text())
    expected = {h["host"]: h["verdict"] for h in report["hosts"]}
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url)
            if not r.url.startswith(("file:", "data:")) else None)
    page.goto((directory / "report" / "fleet.html").as_uri())
    shown = page.evaluate("""() => ({
        rows: Object.fromEntries([...document.querySelectorAll('tr.host')]
            .map(tr => [tr.dataset.host, tr.dataset.verdict])),
        outliers: [...new Set([...document.querySelectorAll('circle[data-outlier="true"]')]
            .map(c => c.dataset.host))],
        firstRow: document.querySelector('#summary tr.host').dataset.host,
        counts: document.querySelector('#summary .counts').innerText,
    })""")
    # The rows behind a folded line (the slow host's several slow checks), a click away.
    summary = f'tr[data-host="{SLOW}"] details.evidence'
    closed = page.evaluate(f"() => document.querySelector('{summary}')?.open")
    page.click(f"{summary} summary")
    opened = page.evaluate(f"""() => {{
        const details = document.querySelector('{summary}');
        return {{open: details.open, rows: [...details.querySelectorAll('li')]
            .filter(li => li.offsetParent !== null).map(li => li.innerText)}};
    }}""")
    RESULTS.mkdir(exist_ok=True)
    page.screenshot(path=str(RESULTS / "fleet-report.png"), full_page=True)
    assert closed is False and opened["open"] is True
    assert any("below its group" in row for row in opened["rows"]), opened
    assert shown["rows"] == expected
    assert (expected[SLOW], expected[BROKEN]) == ("fail", "fail")
    assert shown["outliers"] == [SLOW]
    assert shown["firstRow"] == BROKEN  # the summary leads with the hosts that fail
    assert outside == []
