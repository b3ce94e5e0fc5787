"""`ansible-playbook accept.yml` against a stand-in fleet, and its report in a real browser.

Five hosts, each a container of the project's `cpu` image (the battery's CPU code path,
the venv runtime): three healthy; `fleet-slow` confined to half of one of the machine's
CPUs (`--cpuset-cpus` and a CFS quota, `--cpus 0.3`: a host with a seventh of its
compute), so its compute checks come out far below its siblings' (at about a fifth of
them: more than 30 % below its group, a `fail`); `fleet-broken`, whose `workloads` is gone,
cannot run the battery at all. The play must finish the other hosts, name the slow host
`fail` with the checks that are slow, name the broken host `fail` with its reason, fail a
healthy host for nothing but what the outlier rule says, measure one host again on request
(`--limit HOST,localhost`), and the HTML report must show exactly what its JSON says in
Chromium (read from the page; a screenshot is kept in results/).

Marked `measures`: the batteries run one host at a time (`forks=1`) after every other test
of the session, so the healthy hosts are not measured against the suite's own load. The
machine is still a shared 2-core VM: the quick CPU battery of identical containers, one
after another on an idle machine, measured float32 matmul at 74-91 GFLOP/s and the CNN at
18-22 GFLOP/s, and in CI a healthy host came out 31-36 % below its siblings with no other
process's CPU time to show for it. So the host measured again is the healthy one that
failed for that, if any (as an operator would), and what is asserted of the healthy hosts
is that their verdicts follow the rule from their figures.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ansible.playbook import RECAP, REPO, PlaybookRun, run_playbook
from tests.fleet.rule_reasons import fails_by_the_rules
from tests.images.fixtures import cpu_image
from workloads.fleet.outliers import FAIL_GAP

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.measures]

__all__ = ["cpu_image"]

HEALTHY = ("fleet-a", "fleet-b", "fleet-c")
SLOW = "fleet-slow"
BROKEN = "fleet-broken"
RESULTS = REPO / "results"


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout


@dataclass
class FleetRun:
    """The play over the fleet, then once more for one healthy host (`--limit`)."""

    first: PlaybookRun
    again: PlaybookRun
    measured_again: str
    directory: Path  # the run's records and report/
    first_records: dict[str, bytes]  # each host's record after the first play


@pytest.fixture(scope="module")
def fleet_run(cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FleetRun]:
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
        directory = results / "ci"

        def accept(log: str, *options: str) -> PlaybookRun:
            return run_playbook(
                inventory, [], work / log, "-e", "acceptance_hosts=fleet",
                "-e", "acceptance_become=false", "-e", "acceptance_runtime=venv",
                "-e", "acceptance_venv=/opt/venv", "-e", "acceptance_quick=true",
                "-e", f"acceptance_results_dir={results}", "-e", "acceptance_run=ci",
                "--forks", "1", *options, playbook="accept.yml", vault=None, timeout=900)

        first = accept("accept.log")
        first_records = {p.stem: p.read_bytes() for p in directory.glob("*.json")}
        # Measure one healthy host again, as docs/acceptance.md tells an operator to: the one the
        # first play failed for figures below its group (a shared VM is noisy), else the first.
        again_host = (_failed_below_their_group(directory) or [HEALTHY[0]])[0]
        again = accept("accept-again.log", "--limit", f"{again_host},localhost")
        report = directory / "report"
        if report.is_dir():  # kept for a person to read after the run (results/ is ignored by git)
            shutil.copytree(report, RESULTS / "fleet-report", dirs_exist_ok=True)
        yield FleetRun(first, again, again_host, directory, first_records)
    finally:
        for name in containers.values():
            subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def _failed_below_their_group(directory: Path) -> list[str]:
    """The healthy stand-ins the report failed for figures below their group, if any."""
    try:
        report = json.loads((directory / "report" / "fleet.json").read_text())
    except (OSError, ValueError):
        return []
    return [h["host"] for h in report["hosts"] if h["host"] in HEALTHY
            and h["verdict"] == "fail" and any("below its group" in r for r in h["reasons"])]


def _failing(run: PlaybookRun) -> set[str]:
    """The hosts the play's summary line names as failing ("fail: a, b; warn: c").

    Whitespace is joined first: the YAML callback folds a long line where it likes. The list
    is read as host names joined by ", ": whatever follows it (a "; warn: ..." part, a quote,
    the report's paths on the next line) ends it.
    """
    found = re.search(r"\d+ fail; fail: ((?:[\w.-]+, )*[\w.-]+)", " ".join(run.output.split()))
    return set(found.group(1).split(", ")) if found else set()


@pytest.mark.parametrize("printed", [
    # The command's stdout, its report's paths on the lines after the summary.
    pytest.param("stdout: |-\n    fleet: 1 pass, 0 warn, 4 fail; fail: fleet-a, fleet-broken, "
                 "fleet-c,\n    fleet-slow\n    /tmp/acceptance/ci/report/fleet.html\n",
                 id="stdout-then-paths"),
    # The same line as the debug task's quoted list item.
    pytest.param("msg:\n- 'fleet: 1 pass, 0 warn, 4 fail; fail: fleet-a, fleet-broken, fleet-c, "
                 "fleet-slow'\n", id="quoted-item"),
    # With warnings after the failures.
    pytest.param("fleet: 1 pass, 1 warn, 4 fail; fail: fleet-a, fleet-broken, fleet-c, "
                 "fleet-slow; warn: x\n", id="then-warnings"),
])
def test_the_failing_hosts_are_read_from_the_summary_however_it_is_printed(printed: str) -> None:
    run = PlaybookRun(0, printed, "", 0.0)
    assert _failing(run) == {"fleet-a", "fleet-broken", "fleet-c", "fleet-slow"}


def test_the_play_finishes_every_host_and_records_the_broken_one(fleet_run: FleetRun) -> None:
    run = fleet_run.first
    assert run.returncode == 0, run.explain()
    assert sorted(fleet_run.first_records) == sorted((*HEALTHY, SLOW, BROKEN))
    for host in (*HEALTHY, SLOW):  # the inventory's GPU count, written into each record
        fetched = json.loads(fleet_run.first_records[host])
        assert fetched["inventory"] == {"expected_gpus": 0} and fetched["status"] == "done"
    broken = json.loads(fleet_run.first_records[BROKEN])
    assert broken["status"] == "error"
    assert "/opt/venv/bin/workloads" in broken["error"]
    assert {BROKEN, SLOW} <= _failing(run), run.explain()


def test_measuring_one_host_again_replaces_its_record_and_judges_the_whole_run(
        fleet_run: FleetRun) -> None:
    """`--limit HOST,localhost` with the run's name: that host's record is new, the others
    are as they were, the report covers every host, and baselines are the first passing
    records (a host's baseline is not replaced by its next passing run)."""
    run, directory, host = fleet_run.again, fleet_run.directory, fleet_run.measured_again
    assert run.returncode == 0, run.explain()
    assert {m["host"] for m in RECAP.finditer(run.output)} == {host, "localhost"}, run.explain()
    now = {p.stem: p.read_bytes() for p in directory.glob("*.json")}
    assert sorted(now) == sorted(fleet_run.first_records)
    assert now[host] != fleet_run.first_records[host]  # measured again: a new record
    assert {h: r for h, r in now.items() if h != host} == \
        {h: r for h, r in fleet_run.first_records.items() if h != host}
    report = json.loads((directory / "report" / "fleet.json").read_text())
    assert sorted(h["host"] for h in report["hosts"]) == sorted(now)
    passing = sorted(h["host"] for h in report["hosts"] if h["verdict"] == "pass")
    baselines = directory.parent / "baselines"  # the first passing record of each host
    assert set(passing) <= {p.stem for p in baselines.glob("*.json")}
    for baseline in baselines.glob("*.json"):
        assert baseline.read_bytes() in (fleet_run.first_records[baseline.stem],
                                         now[baseline.stem])


def test_the_slow_host_fails_for_its_compute_checks(fleet_run: FleetRun) -> None:
    directory = fleet_run.directory
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
        # A healthy stand-in fails only as the rule says, for a figure 30 % below the median
        # of the other hosts, never for anything else (a record called incomplete, a check
        # called failed). Whether identical hosts come out within 30 % is this machine's
        # noise: the CPU battery's quick figures of identical containers spread by up to a
        # third on a shared 2-core VM (see the module's docstring); how often the rule fails
        # a healthy host is measured by `workloads bench fleet --rates`, not here.
        # (The host measured again is also compared with its first passing record, its
        # baseline, by the same 30 % line.)
        # A quick figure can also come out below the fail line of its own limit (the CPU's
        # idle peak the battery measured): allowed when the report's figure says so too.
        failing = [r for r in verdicts[host]["reasons"] if r.startswith("fail")]
        assert all(fails_by_the_rules(r)
                   or _below_its_own_fail_line(report, host, r) for r in failing), \
            f"{verdicts[host]}\n{figures}"
        if any("below its group" in r for r in failing):
            worst = max(_gap_below_the_others(report, host, f["check"])
                        for f in report["figures"] if f["host"] == host and f["outlier"])
            assert worst >= FAIL_GAP, f"{verdicts[host]}\n{figures}"
    assert verdicts[BROKEN]["verdict"] == "fail"


# "fail: matmul float32 2048²: 63% of 110 GFLOP/s (this CPU's idle peak, ...), below the 70% fail
# line: ..." (workloads/accept/verdicts.py, against_limit)
OWN_FAIL_LINE = re.compile(r"fail: (?P<check>.+?): \d+% of (?P<limit>[\d,.]+) \S+ \(.*?\), "
                           r"below the (?P<line>\d+)% fail line")


def _below_its_own_fail_line(report: dict[str, Any], host: str, reason: str) -> bool:
    """Whether `reason` fails the host's figure against its own limit, and the report's figure
    for that check is indeed below that share of the limit."""
    found = OWN_FAIL_LINE.match(reason)
    if found is None:
        return False
    values = [f["value"] for f in report["figures"]
              if f["host"] == host and f["check"] == found["check"]]
    limit = float(found["limit"].replace(",", ""))
    return len(values) == 1 and values[0] / limit < int(found["line"]) / 100


def _gap_below_the_others(report: dict[str, Any], host: str, check: str) -> float:
    """How far `host`'s figure for `check` is below the median of the other hosts' (a share)."""
    values = {f["host"]: f["value"] for f in report["figures"] if f["check"] == check}
    reference = statistics.median(v for h, v in values.items() if h != host)
    return 1 - values[host] / reference


def test_the_report_shows_it_in_chromium(fleet_run: FleetRun, page: Any) -> None:
    directory = fleet_run.directory
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
    # The points marked as outliers are the report's: the slow host's, and any healthy host's
    # warning (noise, see test_the_slow_host_fails_for_its_compute_checks).
    assert SLOW in shown["outliers"]
    assert sorted(shown["outliers"]) == sorted({f["host"] for f in report["figures"]
                                                if f["outlier"]})
    assert expected[shown["firstRow"]] == "fail"  # the summary leads with the hosts that fail
    assert outside == []
