"""Start a slow module's set-up when the session starts, so that it overlaps the other tests.

Why: the VM tests (tests/vm/test_vagrant_up.py, tests/hypervisor/test_vm_hypervisor.py)
spend most of their time booting a guest under TCG and converging a playbook
in it, waiting on one or two emulated CPUs. Run in order, that is a quarter of
the suite's wall time on CI's two cores. Registered here, the same work starts
in one background thread as soon as collection has selected the module's tests,
and the module's fixture only collects the result when pytest reaches it. The
brownfield stand-ins of tests/ansible/test_platforms.py are jobs too (one per
parameter, `needed_by`), queued before the guests because their tests come first.

* A job is registered at import time with `@background_job(__file__)`; it runs
  only if at least one test of that module was selected (`-k`, `-m`, paths).
  With `needed_by`, only the module's tests it accepts count: a module whose
  parametrized fixture takes some of its parameters from jobs (one per
  parameter) starts only the jobs of the parameters selected.
* Jobs run one after another, in the order the session will need them (the
  position of each module's first test), on a single worker thread: one guest
  at a time beside the foreground tests, never two.
* A job gets an ExitStack for what must stay up while its tests run (the VM,
  the HTTP services); the module fixture closes it when the module is done
  (`BackgroundJobs.held`), so a guest never idles until the end of the session.
* An exception in a job, `pytest.skip` included, is raised again by `result()`,
  in the fixture: it shows as that module's set-up error (or skip), as before.
* `--no-background` runs each job in its fixture instead, as a plain fixture would.
* `run_last=True` moves the module's tests to the end of the session, so the job has
  the whole session to finish and its guest never makes the foreground wait. It is
  for the longest job (the `vagrant up` guest): on CI's two cores that guest gets one
  emulated CPU, and the tests that need nothing from it run meanwhile.
* `run_last=AFTER_RUN_LAST` goes one step further: the module's tests come after those
  of every `run_last=True` module, so its job is queued behind theirs. It is for a
  self-contained set-up (a play on its own container) that would otherwise run in the
  foreground: the `run_last=True` modules end the session with plays of their own
  (upgrades on their converged hosts) that keep only one core busy, and these jobs
  fill the other one meanwhile. tests/README.md has the session's shape.
* If the session ends early (-x, Ctrl-C), the job's cancel callbacks run (they
  stop the guest, so the job fails fast) and its stack is closed.

The thread writes nothing to stdout (pytest's capture would hand it to whichever
test is running); a job returns its timings and the fixture prints them. At the end
of the session each job that ran gets one line in the terminal summary, also kept
as JSON (`background-jobs.json` beside the other timings in $TFHOST_RESULTS or
results/): when it started, how long it ran and how long the tests waited for it.
A wait is the figure that says the job, not the foreground, set the session's length.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

JOIN_TIMEOUT_S = 600
# run_last ranks: a module's tests go after those of every lower rank (0: not run_last).
RUN_LAST = 1
AFTER_RUN_LAST = 2
RESULTS = Path(os.environ.get("TFHOST_RESULTS", Path(__file__).resolve().parents[2] / "results"))


@dataclass
class JobContext:
    """What a job gets: a work folder, a stack to keep its services up, a cancel hook."""

    workdir: Path
    stack: ExitStack = field(default_factory=ExitStack)
    cancelled: threading.Event = field(default_factory=threading.Event)
    _cancel_callbacks: list[Callable[[], object]] = field(default_factory=list)

    def on_cancel(self, callback: Callable[[], object]) -> None:
        """`callback` runs (on the main thread) if the session ends before the job does."""
        self._cancel_callbacks.append(callback)

    def cancel(self) -> None:
        self.cancelled.set()
        for callback in reversed(self._cancel_callbacks):
            with suppress(Exception):  # best effort: the stack still closes
                callback()


Work = Callable[[JobContext], Any]


@dataclass
class JobHandle:
    """One registered job: where it comes from, its result once run, how long it took."""

    name: str
    module: Path
    work: Work
    run_last: int = 0  # a rank: 0, RUN_LAST (True) or AFTER_RUN_LAST
    needed_by: Callable[[pytest.Item], bool] | None = None
    context: JobContext | None = None
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: BaseException | None = None
    started_at: float | None = None
    seconds: float | None = None
    # How long the module's fixture waited for the job to finish (0 when it was done already).
    waited: float | None = None

    def run(self) -> None:
        assert self.context is not None, "prepare() gives the job its work folder first"
        self.started_at = time.monotonic()
        try:
            self.value = self.work(self.context)
        except BaseException as error:  # handed to the fixture as it is, skips too
            self.error = error
        finally:
            self.seconds = time.monotonic() - self.started_at
            self.done.set()

    def needed_for(self, item: pytest.Item) -> bool:
        """Whether `item` uses this job: a test of its module that `needed_by` accepts."""
        if Path(str(item.path)).resolve() != self.module:
            return False
        return self.needed_by is None or self.needed_by(item)

    def prepare(self, workdir: Path) -> None:
        self.context = JobContext(workdir)

    def close(self) -> None:
        """Stop what the job left running (its ExitStack); safe to call twice."""
        if self.context is not None:
            self.context.stack.close()


_REGISTRY: dict[str, JobHandle] = {}


def _skipped_by_mark(item: pytest.Item) -> bool:
    """True for a test that a `skip` mark, or a `skipif` with a true boolean, will skip.

    An opt-in module (skipif on an environment variable) must not start its job.
    String conditions are not evaluated here: such a test counts as selected.
    """
    if item.get_closest_marker("skip") is not None:
        return True
    for mark in item.iter_markers("skipif"):
        condition = mark.args[0] if mark.args else mark.kwargs.get("condition")
        if isinstance(condition, bool) and condition:
            return True
    return False


def background_job(module_file: str, name: str | None = None, run_last: bool | int = False,
                   needed_by: Callable[[pytest.Item], bool] | None = None,
                   ) -> Callable[[Work], Work]:
    """Register `work` as the background set-up of the test module `module_file`.

    With `run_last` (True, or AFTER_RUN_LAST), the module's tests run after every test
    of a lower rank. With `needed_by`, the job runs only if a selected test of the module
    satisfies it, and is queued by the first such test.
    """
    def register(work: Work) -> Work:
        key = name or work.__qualname__
        _REGISTRY[key] = JobHandle(key, Path(module_file).resolve(), work, int(run_last),
                                   needed_by)
        return work
    return register


class BackgroundJobs:
    """The pytest plugin that starts the selected jobs and hands their results to fixtures."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.enabled = not config.getoption("no_background", default=False)
        self.queue: list[JobHandle] = []
        self.thread: threading.Thread | None = None
        self.stopping = threading.Event()
        self.session_start = time.monotonic()

    def _workdir(self, job: JobHandle) -> Path:
        factory: pytest.TempPathFactory = self.config._tmp_path_factory  # type: ignore[attr-defined]
        return factory.mktemp(job.name)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Move the tests of `run_last` modules to the end by rank, each module's in its order."""
        rank: dict[Path, int] = {}
        for job in _REGISTRY.values():
            rank[job.module] = max(rank.get(job.module, 0), job.run_last)
        if not any(rank.values()):
            return
        items[:] = sorted(items, key=lambda item: rank.get(Path(str(item.path)).resolve(), 0))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        first_use: dict[str, int] = {}
        for index, item in enumerate(session.items):
            if _skipped_by_mark(item):
                continue
            for job in _REGISTRY.values():
                if job.name not in first_use and job.needed_for(item):
                    first_use[job.name] = index
        self.queue = sorted((_REGISTRY[name] for name in first_use),
                            key=lambda job: first_use[job.name])
        if session.config.option.collectonly:
            return
        for job in self.queue:  # on the main thread: mktemp is not meant for threads
            job.prepare(self._workdir(job))
        if self.enabled and self.queue:
            self.thread = threading.Thread(target=self._run_all, name="background-jobs",
                                           daemon=True)
            self.thread.start()

    def _run_all(self) -> None:
        for job in self.queue:
            if self.stopping.is_set():
                break
            job.run()

    def result(self, name: str) -> Any:
        """The job's value; waits for it, runs it here if it never started; re-raises its error."""
        job = _REGISTRY[name]
        if self.thread is None or job not in self.queue:
            if job.context is None:
                job.prepare(self._workdir(job))
            if not job.done.is_set():
                job.run()
        waiting_since = time.monotonic()
        job.done.wait()
        if job.waited is None:
            job.waited = time.monotonic() - waiting_since
        if job.error is not None:
            raise job.error
        return job.value

    def handle(self, name: str) -> JobHandle:
        return _REGISTRY[name]

    @contextmanager
    def held(self, name: str) -> Iterator[Any]:
        """The job's value for a module fixture; its stack (the guest) closes on leaving."""
        try:
            yield self.result(name)
        finally:
            _REGISTRY[name].close()

    def timings(self) -> dict[str, dict[str, float | None]]:
        """Per job that ran: seconds into the session it started, ran, and was waited for."""
        return {job.name: {"started_after_s": round(job.started_at - self.session_start, 1),
                           "ran_s": None if job.seconds is None else round(job.seconds, 1),
                           "tests_waited_s": None if job.waited is None else round(job.waited, 1)}
                for job in _REGISTRY.values() if job.started_at is not None}

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        timings = self.timings()
        if not timings:
            return
        for name, figures in timings.items():
            terminalreporter.write_line(
                f"background job {name}: started {figures['started_after_s']} s into the session,"
                f" ran {figures['ran_s']} s, the tests waited {figures['tests_waited_s']} s for it")
        with suppress(OSError):  # a figure to keep, never a reason to fail the session
            RESULTS.mkdir(parents=True, exist_ok=True)
            (RESULTS / "background-jobs.json").write_text(json.dumps(timings, indent=2) + "\n")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.stopping.set()  # the worker starts no further job
        for job in self.queue:
            if job.started_at is not None and not job.done.is_set() and job.context is not None:
                job.context.cancel()
        if self.thread is not None:
            self.thread.join(JOIN_TIMEOUT_S)
        for job in self.queue:
            job.close()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-background", dest="no_background", action="store_true",
                     help="run the VM tests' set-up in their fixtures instead of in a "
                          "background thread started after collection")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(BackgroundJobs(config), "background-jobs")


@pytest.fixture(scope="session")
def background_jobs(pytestconfig: pytest.Config) -> BackgroundJobs:
    plugin = pytestconfig.pluginmanager.get_plugin("background-jobs")
    assert isinstance(plugin, BackgroundJobs)
    return plugin


T = TypeVar("T")


def set_up_in_background(module_file: str, name: str,
                         set_up: Callable[[Path], AbstractContextManager[T]],
                         before: Callable[[], object] = lambda: None,
                         run_last: int = RUN_LAST,
                         ) -> Callable[[BackgroundJobs], Iterator[T]]:
    """Register `set_up(workdir)` as a `run_last` job of the module; return its fixture's body.

    For a module whose one slow set-up is a context manager (a host, its runs): the job
    enters it in its own stack after `before()` (e.g. `ensure_engine`), and the module
    wraps the returned function with `pytest.fixture(scope="module", name=...)`; leaving
    the fixture closes the stack (the host goes with the module).
    """
    def work(job: JobContext) -> T:
        before()
        return job.stack.enter_context(set_up(job.workdir))

    background_job(module_file, name=name, run_last=run_last)(work)

    def held_value(background_jobs: BackgroundJobs) -> Iterator[T]:
        with background_jobs.held(name) as value:
            yield value

    return held_value
