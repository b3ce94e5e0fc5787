"""tests/support/background.py: jobs start after collection and overlap the tests before them.

Each case runs an inner pytest session in a subprocess (the registry is
module state) on small generated test modules whose jobs write what happened
to a journal file, with times, so the order of events can be asserted.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.support.inner_pytest import InnerPytest

JOURNAL_HELPER = '''
import time
from pathlib import Path

JOURNAL = Path(__file__).parent / "journal.txt"


def note(event):
    with JOURNAL.open("a") as stream:
        stream.write(f"{time.monotonic():.3f} {event}\\n")
'''

SLOW_MODULE = '''
from contextlib import contextmanager

import pytest

from journal import note
from tests.support.background import background_job


@contextmanager
def service():
    note("service up")
    try:
        yield "svc"
    finally:
        note("service down")


@background_job(__file__, name="slow")
def slow(job):
    note("job start")
    job.stack.enter_context(service())
    job.on_cancel(lambda: note("cancelled"))
    for _ in range(JOB_TICKS):
        if job.cancelled.is_set():
            raise RuntimeError("stopped")
        __import__("time").sleep(0.1)
    note("job end")
    return {"answer": 42, "workdir": str(job.workdir)}


@pytest.fixture(scope="module")
def result(background_jobs):
    with background_jobs.held("slow") as value:
        yield value


def test_uses_the_result(result):
    note("slow test")
    assert result["answer"] == 42
'''

FAST_MODULE = '''
import time

from journal import note


def test_first():
    note("fast test start")
    time.sleep(FAST_SECONDS)
    note("fast test end")


def test_fails_early():
    assert FAST_FAILS is False
'''


def _events(journal: Path) -> list[tuple[float, str]]:
    lines = journal.read_text().splitlines() if journal.exists() else []
    return [(float(line.split(" ", 1)[0]), line.split(" ", 1)[1]) for line in lines]


def _names(events: list[tuple[float, str]]) -> list[str]:
    return [name for _, name in events]


def _session(inner: InnerPytest, *args: str, job_ticks: int = 10,
             fast_seconds: float = 1.5, fast_fails: bool = False,
             job_body: str | None = None) -> tuple[pytest.RunResult, list[tuple[float, str]]]:
    inner.makepyfile(journal=JOURNAL_HELPER)
    slow = SLOW_MODULE.replace("JOB_TICKS", str(job_ticks))
    if job_body is not None:
        slow = slow.replace('    note("job start")\n', f'    note("job start")\n{job_body}')
    # pytest runs a_fast before z_slow: the job must start before a_fast ends.
    inner.makepyfile(
        test_a_fast=FAST_MODULE.replace("FAST_SECONDS", str(fast_seconds))
        .replace("FAST_FAILS", str(fast_fails)),
        test_z_slow=slow,
    )
    inner.makeini("[pytest]\n")
    result = inner.runpytest_subprocess("-p", "tests.support.background", "-v",
                                           "-p", "no:cacheprovider", *args)
    return result, _events(inner.path / "journal.txt")


@pytest.fixture
def inner(tmp_path: Path) -> InnerPytest:
    """The inner session's folder: its modules importable, its timings in its own results/
    (not the suite's), all in the child's environment (tests/support/inner_pytest.py)."""
    return InnerPytest(tmp_path)


def test_job_starts_after_collection_and_overlaps_earlier_tests(inner: InnerPytest) -> None:
    result, events = _session(inner)
    result.assert_outcomes(passed=3)
    names = _names(events)
    assert names.index("job start") < names.index("fast test end"), names
    assert names.index("job end") < names.index("slow test"), names
    assert names[-1] == "service down", names


def test_the_summary_says_how_long_the_tests_waited_for_each_job(
        inner: InnerPytest) -> None:
    """The job (about 3 s) outlasts the fast test (0.5 s): the slow module's fixture waits."""
    result, _ = _session(inner, job_ticks=30, fast_seconds=0.5)
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["background job slow: started * s into the session, ran * s,"
                                 " the tests waited * s for it"])
    figures = json.loads((inner.path / "results" / "background-jobs.json").read_text())["slow"]
    assert figures["ran_s"] >= 2.9
    assert 1.0 <= figures["tests_waited_s"] <= figures["ran_s"], figures
    assert 0 <= figures["started_after_s"] < 10


def test_the_stack_closes_when_the_module_is_done(inner: InnerPytest) -> None:
    inner.makepyfile(test_zz_after=(
        "from journal import note\n\n\ndef test_after():\n    note('after module')\n"))
    result, events = _session(inner)
    result.assert_outcomes(passed=4)
    names = _names(events)
    assert names.index("service down") < names.index("after module"), names


def test_deselected_module_starts_no_job(inner: InnerPytest) -> None:
    result, events = _session(inner, "-k", "fast")
    result.assert_outcomes(passed=2, deselected=1)
    assert "job start" not in _names(events)


def test_no_background_runs_the_job_in_its_fixture(inner: InnerPytest) -> None:
    result, events = _session(inner, "--no-background")
    result.assert_outcomes(passed=3)
    names = _names(events)
    assert names.index("fast test end") < names.index("job start"), names


def test_a_failing_job_is_the_modules_setup_error(inner: InnerPytest) -> None:
    result, _ = _session(inner, job_body='    raise ValueError("the box would not boot")\n')
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(["*ValueError: the box would not boot*"])


def test_a_skip_in_the_job_skips_the_module(inner: InnerPytest) -> None:
    result, _ = _session(inner, "-rs", job_body='    pytest.skip("needs root")\n')
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*needs root*"])


def test_a_session_that_stops_early_cancels_the_job(inner: InnerPytest) -> None:
    # -x stops at test_fails_early while the job still has ~20 s to run.
    result, events = _session(inner, "-x", job_ticks=200, fast_seconds=0.5, fast_fails=True)
    assert result.ret == 1
    names = _names(events)
    assert "cancelled" in names and "job end" not in names, names
    assert names[-1] == "service down", names


def test_jobs_run_in_the_order_their_modules_are_needed(inner: InnerPytest) -> None:
    inner.makepyfile(test_m_middle=textwrap.dedent('''
        import pytest

        from journal import note
        from tests.support.background import background_job


        @background_job(__file__, name="middle")
        def middle(job):
            note("middle job")
            return 1


        def test_middle(background_jobs):
            assert background_jobs.result("middle") == 1
    '''))
    result, events = _session(inner)
    result.assert_outcomes(passed=4)
    names = _names(events)
    assert names.index("middle job") < names.index("job start"), names


def test_a_module_skipped_by_its_mark_starts_no_job(inner: InnerPytest) -> None:
    result, events = _session(inner, "-rs", job_body="")
    result.assert_outcomes(passed=3)
    assert "job start" in _names(events)  # the same module without the mark
    inner.makepyfile(test_z_slow=(inner.path / "test_z_slow.py").read_text().replace(
        "from tests.support.background import background_job",
        "from tests.support.background import background_job\n\n"
        "pytestmark = pytest.mark.skipif(True, reason='opt-in')"))
    (inner.path / "journal.txt").unlink()
    skipped = inner.runpytest_subprocess("-p", "tests.support.background", "-p",
                                            "no:cacheprovider")
    skipped.assert_outcomes(passed=2, skipped=1)
    assert "job start" not in _names(_events(inner.path / "journal.txt"))


def test_a_run_last_module_runs_after_every_other_test(inner: InnerPytest) -> None:
    inner.makepyfile(test_m_last=textwrap.dedent('''
        from journal import note
        from tests.support.background import background_job


        @background_job(__file__, name="last", run_last=True)
        def last(job):
            note("last job")
            return 1


        def test_last_one(background_jobs):
            note("last test one")
            assert background_jobs.result("last") == 1


        def test_last_two():
            note("last test two")
    '''))
    result, events = _session(inner)
    result.assert_outcomes(passed=5)
    names = _names(events)
    # Alphabetically test_m_last comes before test_z_slow; run_last puts it after,
    # its own tests still in their order.
    assert names.index("slow test") < names.index("last test one") < names.index("last test two")


def test_an_after_run_last_module_follows_the_run_last_ones_and_so_does_its_job(
        inner: InnerPytest) -> None:
    """AFTER_RUN_LAST: a self-contained set-up whose job must not hold up the converges of
    the run_last modules (queued behind theirs), and whose tests come after theirs."""
    inner.makepyfile(
        test_b_after=textwrap.dedent('''
            from journal import note
            from tests.support.background import AFTER_RUN_LAST, background_job


            @background_job(__file__, name="after", run_last=AFTER_RUN_LAST)
            def after(job):
                note("after job")
                return 2


            def test_after(background_jobs):
                note("after test")
                assert background_jobs.result("after") == 2
        '''),
        test_m_last=textwrap.dedent('''
            from journal import note
            from tests.support.background import background_job


            @background_job(__file__, name="last", run_last=True)
            def last(job):
                note("last job")
                return 1


            def test_last(background_jobs):
                note("last test")
                assert background_jobs.result("last") == 1
        '''))
    result, events = _session(inner)
    result.assert_outcomes(passed=5)
    names = _names(events)
    # Alphabetically test_b_after comes first; its rank puts it and its job after the others.
    assert names.index("slow test") < names.index("last test") < names.index("after test"), names
    assert names.index("last job") < names.index("after job"), names


PER_PARAMETER_MODULE = '''
import pytest

from journal import note
from tests.support.background import background_job

HOSTS = ["fresh", "old-a", "old-b"]


def _job(host):
    def work(job):
        note(f"job {host}")
        return f"set up {host}"
    return work


def _uses(host):
    return lambda item: item.callspec.params.get("host_run") == host


for _host in HOSTS[1:]:  # one job per parameter set up in the background
    background_job(__file__, name=f"job-{_host}", needed_by=_uses(_host))(_job(_host))


@pytest.fixture(scope="module", params=HOSTS)
def host_run(request, background_jobs):
    if request.param == "fresh":
        yield "set up fresh"
        return
    with background_jobs.held(f"job-{request.param}") as value:
        yield value


def test_host(host_run):
    note(f"test {host_run}")
'''


def test_a_job_per_parameter_runs_only_for_the_parameters_selected(
        inner: InnerPytest) -> None:
    """needed_by: a parametrized module starts the jobs of its selected parameters only,
    queued by the first test that uses each."""
    inner.makepyfile(journal=JOURNAL_HELPER, test_params=PER_PARAMETER_MODULE)
    inner.makeini("[pytest]\n")
    args = ("-p", "tests.support.background", "-p", "no:cacheprovider")
    result = inner.runpytest_subprocess(*args, "-k", "fresh or old-b")
    result.assert_outcomes(passed=2, deselected=1)
    names = _names(_events(inner.path / "journal.txt"))
    assert "job old-b" in names and "job old-a" not in names, names
    assert names.index("job old-b") < names.index("test set up old-b"), names

    (inner.path / "journal.txt").unlink()
    result = inner.runpytest_subprocess(*args, "-k", "fresh")
    result.assert_outcomes(passed=1, deselected=2)
    assert [name for name in _names(_events(inner.path / "journal.txt"))
            if name.startswith("job")] == []

    (inner.path / "journal.txt").unlink()
    result = inner.runpytest_subprocess(*args)
    result.assert_outcomes(passed=3)
    names = _names(_events(inner.path / "journal.txt"))
    assert [name for name in names if name.startswith("job")] == ["job old-a", "job old-b"]
