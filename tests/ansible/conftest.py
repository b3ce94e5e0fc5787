"""Fixtures for the Ansible tests: stub repositories, fake NGC registry, target hosts.

The expensive scenarios (see lab.py) run in test_site.py's background job, which
starts at collection (tests/support/background.py); the module's tests run last
and find them done. Every container, server and thread is stopped at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.fake_registry import FakeRegistry, fake_registry
from tests.ansible.lab import (
    ConvergeResult,
    FreshResult,
    Lab,
    LegacyResult,
    converge,
    fresh_host_runs,
    legacy_image,
    legacy_os,
)
from tests.ansible.playbook import EXAMPLE_NGC_API_KEY
from tests.ansible.target import target_image
from tests.ansible.timings import TIMINGS, write_timings
from tests.fixtures.aptrepo import build_stub_repos, serve_directory
from tests.support.background import JobContext
from tests.support.docker_engine import ensure_engine

# Scenarios run one after the other by default: on a 2-core CI machine running
# them side by side (TFHOST_ANSIBLE_PARALLEL=3) saved nothing overall (356 s
# against 372 s) and inflated each measured run through contention.
PARALLEL = int(os.environ.get("TFHOST_ANSIBLE_PARALLEL", "1"))


@dataclass
class Scenarios:
    lab: Lab
    registry: FakeRegistry
    converge: Future[ConvergeResult]
    fresh: Future[FreshResult]
    legacy: Future[LegacyResult]


def _remove_hosts(scenarios: Scenarios) -> None:
    for future in (scenarios.converge, scenarios.fresh):
        if future.done() and future.exception() is None:
            future.result().host.remove()


@contextmanager
def running_scenarios(workdir: Path) -> Iterator[Scenarios]:
    """The lab's servers and the three scenarios, submitted; all stopped and removed on leaving."""
    suffix = str(os.getpid())
    # The Debian 11 image is only needed last: build it while the rest starts.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="image") as builder:
        legacy_build = builder.submit(legacy_image)
        repos = build_stub_repos(workdir / "repos")
        image = target_image()
        with serve_directory(repos.root, workdir / "repo-http.log") as base_url, \
                fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY) as registry, \
                ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="scenario") as pool:
            lab = Lab(workdir, repos, base_url, registry.address, image)
            running = Scenarios(
                lab,
                registry,
                pool.submit(converge, lab, f"tfhost-ans-converge-{suffix}"),
                pool.submit(fresh_host_runs, lab, f"tfhost-ans-fresh-{suffix}"),
                pool.submit(legacy_os, lab, f"tfhost-ans-legacy-{suffix}", legacy_build),
            )
            try:
                yield running
            finally:
                for future in (running.converge, running.fresh, running.legacy):
                    future.exception()  # wait: a scenario still running holds a container
                _remove_hosts(running)


def run_scenarios(job: JobContext) -> Scenarios:
    """test_site.py's background job: the three scenarios, run to their end.

    The job holds the background thread until they are done (one set-up at a time
    beside the foreground); the servers and hosts stay up in its stack until the
    module is done.
    """
    ensure_engine()
    running = job.stack.enter_context(running_scenarios(job.workdir))
    for future in (running.converge, running.fresh, running.legacy):
        future.exception()
    return running


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not TIMINGS:
        return
    terminalreporter.section("ansible timings (seconds)")
    for name, seconds in TIMINGS.items():
        terminalreporter.write_line(f"{name:<40} {seconds:>8.1f}")
    terminalreporter.write_line(f"written to {write_timings()}")
