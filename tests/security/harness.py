"""Run the real CLI on one hostile input, in a child held to a budget, and measure it.

Why a harness of its own: a hardening test that calls a function in-process proves
the function; the family tests here prove the command a user runs, the way a user
runs it, and they measure what the issue's budgets name: the exit status, the one
line on stderr, the child's peak memory above the same command's baseline, its wall
time, and that nothing outside its trusted directory changed.

* The child runs ``python -m workloads ...`` (or any argv) with ``RLIMIT_AS`` set in
  ``preexec_fn``: a reader that trusts a size fails there (MemoryError) instead of
  taking the machine's memory from the suite (and the test then fails on the
  traceback, not on the machine).
* Its peak memory is ``ru_maxrss`` from ``os.wait4`` (KiB on Linux): the child's own
  high-water mark, not a sample.
* It is killed at :attr:`Budget.kill_s` (a multiple of the wall budget) so an input
  that blocks (a FIFO) or loops fails the test instead of hanging the suite.
* Everything under :attr:`Sandbox.root` but outside :attr:`Sandbox.trusted` is
  snapshotted before and after (type, size, mode, mtime, content hash of files): a
  write through a planted link shows as a change.

Reusable: another family builds a :class:`Sandbox`, writes its inputs into
``trusted`` (or links from ``trusted`` to ``outside``), calls :func:`run_child`, and
records the outcome in a :class:`FamilyReport`, which holds it to the family's
contract: :func:`problems` (a refusal: exit 2, one printable line) by default,
:func:`printed_problems` (a report over hostile text: exit 0, no control character
out) where succeeding is right; both with the same memory, time and outside budgets.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20
LINE_MAX = 200
# The child's address-space cap: Python with NumPy, matplotlib and their thread pools maps
# about 1 GiB of address space it never touches; 2 GiB leaves the reader one more.
ADDRESS_SPACE = 2 << 30


@dataclass(frozen=True)
class Budget:
    """What one run may take: memory above the command's baseline, and wall time."""

    memory_mib: int = 256
    wall_s: float = 30.0

    @property
    def kill_s(self) -> float:
        """When the child is killed: past the budget, so a slow run still shows its time."""
        return self.wall_s * 2 + 5


@dataclass
class Sandbox:
    """``root/trusted`` (where the command may write) and ``root/outside`` (where not)."""

    root: Path

    @property
    def trusted(self) -> Path:
        return self.root / "trusted"

    @property
    def outside(self) -> Path:
        return self.root / "outside"

    @classmethod
    def make(cls, root: Path) -> Sandbox:
        box = cls(root)
        box.trusted.mkdir(parents=True, exist_ok=True)
        box.outside.mkdir(parents=True, exist_ok=True)
        (box.outside / "victim.txt").write_text("another user's file\n")
        return box

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment whose every default location (home, caches, results) is trusted."""
        home = self.trusted / "home"
        home.mkdir(exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "MPLCONFIGDIR": str(home / "mpl"),
            "WORKLOADS_CACHE": str(self.trusted / "cache"),
            "WORKLOADS_RESULTS": str(self.trusted / "results"),
            "PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'scripts'}",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MPLBACKEND": "Agg",
            "LANG": "C.UTF-8",
        }
        env.update(extra or {})
        return env

    def snapshot(self) -> dict[str, tuple[object, ...]]:
        """Every entry under ``root`` outside ``trusted``: what a write would change."""
        found: dict[str, tuple[object, ...]] = {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            here = Path(dirpath)
            if here == self.root:
                dirnames[:] = [d for d in dirnames if here / d != self.trusted]
            for name in [*dirnames, *filenames]:
                path = here / name
                info = path.lstat()
                digest = ""
                if path.is_file() and not path.is_symlink():
                    digest = hashlib.sha256(path.read_bytes()).hexdigest()
                found[str(path.relative_to(self.root))] = (
                    info.st_mode, info.st_size, info.st_mtime_ns, digest)
        return found


@dataclass(frozen=True)
class Outcome:
    """What one child did."""

    returncode: int
    stdout: str
    stderr: str
    peak_mib: float
    wall_s: float
    changed_outside: tuple[str, ...]
    killed: bool


def _limit_address_space(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_child(argv: Sequence[str], box: Sandbox, budget: Budget, *,
              env: Mapping[str, str] | None = None, address_space: int = ADDRESS_SPACE,
              cwd: Path | None = None) -> Outcome:
    """Run ``argv`` (``python -m workloads`` prepended when it starts with no program)."""
    command = list(argv)
    if not command or not command[0].startswith("/"):
        command = [sys.executable, "-m", "workloads", *command]
    before = box.snapshot()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.monotonic()
        child = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            env=dict(env if env is not None else box.env()), cwd=cwd or box.trusted,
            preexec_fn=lambda: _limit_address_space(address_space), start_new_session=True)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)

        timer = threading.Timer(budget.kill_s, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - started
        child.returncode = os.waitstatus_to_exitcode(status)  # Popen must not wait again
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    after = box.snapshot()
    changed = tuple(sorted(k for k in before.keys() | after.keys()
                           if before.get(k) != after.get(k)))
    return Outcome(child.returncode, stdout, stderr, usage.ru_maxrss / 1024, wall, changed,
                   killed.is_set())


def _budget_problems(outcome: Outcome, baseline_mib: float, budget: Budget) -> list[str]:
    """How ``outcome`` misses the budgets every family shares: time, memory, the outside."""
    found = []
    if outcome.killed:
        found.append(f"killed after {budget.kill_s:g} s (blocked or looping)")
    if outcome.peak_mib - baseline_mib > budget.memory_mib:
        found.append(f"peak {outcome.peak_mib:.0f} MiB, over {baseline_mib:.0f} + "
                     f"{budget.memory_mib} MiB")
    if outcome.wall_s > budget.wall_s:
        found.append(f"{outcome.wall_s:.1f} s, over the {budget.wall_s:g} s budget")
    if outcome.changed_outside:
        found.append(f"changed outside the trusted directory: {outcome.changed_outside[:3]}")
    return found


def problems(outcome: Outcome, baseline_mib: float, budget: Budget) -> list[str]:
    """Every way ``outcome`` misses the refusal contract (empty: it met all of it)."""
    found = []
    if outcome.returncode != 2:
        found.append(f"exit {outcome.returncode}, not 2")
    lines = outcome.stderr.splitlines()
    if len(lines) != 1:
        found.append(f"{len(lines)} stderr lines, not 1: {outcome.stderr[-400:]!r}")
    elif len(lines[0]) > LINE_MAX or not lines[0].isprintable():
        found.append(f"stderr line of {len(lines[0])} characters or with control characters")
    return found + _budget_problems(outcome, baseline_mib, budget)


def unprintable(text: str) -> list[str]:
    """The characters of ``text`` a terminal or a viewer would act on (all but line breaks)."""
    return sorted({c for c in text if not c.isprintable() and c != "\n"})


def printed_problems(outcome: Outcome, baseline_mib: float, budget: Budget) -> list[str]:
    """The contract of a command that reports on hostile text: it succeeds, printing it shown.

    A report over records whose names hold control characters is a report, not a
    refusal: exit 0 is right, and what must hold is that no control character
    reaches stdout or stderr, within the same memory, time and outside budgets.
    """
    found = []
    if outcome.returncode != 0:
        found.append(f"exit {outcome.returncode}, not 0: {outcome.stderr[-300:]!r}")
    for stream, text in (("stdout", outcome.stdout), ("stderr", outcome.stderr)):
        if bad := unprintable(text):
            found.append(f"{stream} holds control characters {bad[:5]!r}")
    return found + _budget_problems(outcome, baseline_mib, budget)


Contract = Callable[[Outcome, float, Budget], list[str]]


@dataclass
class FamilyReport:
    """The worst case of a family, for the printed table (docs/benchmarks.md)."""

    family: str
    budget: Budget
    baseline_mib: float = 0.0
    cases: int = 0
    worst_mib: float = 0.0
    worst_s: float = 0.0
    failures: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    contract: Contract = problems

    def add(self, case: str, outcome: Outcome, also: Sequence[str] = ()) -> None:
        """Count ``outcome``; every way it misses the contract, and ``also``, is a failure.

        ``also``: what the test found beyond the child's own outcome (a written file
        that holds what it must not).
        """
        self.cases += 1
        self.lines.append(f"{case}: {outcome.stderr.strip()[-200:]}")
        self.worst_mib = max(self.worst_mib, outcome.peak_mib - self.baseline_mib)
        self.worst_s = max(self.worst_s, outcome.wall_s)
        for problem in [*self.contract(outcome, self.baseline_mib, self.budget), *also]:
            self.failures.append(f"{case}: {problem}")

    def row(self) -> str:
        """``| family | cases | memory budget | worst | wall budget | worst |``"""
        return (f"| {self.family} | {self.cases} | +{self.budget.memory_mib} MiB | "
                f"+{self.worst_mib:.0f} MiB (baseline {self.baseline_mib:.0f}) | "
                f"{self.budget.wall_s:g} s | {self.worst_s:.1f} s |")

    def check(self) -> None:
        """Print the row (``pytest -s`` shows it), then fail naming every missed case."""
        if os.environ.get("SECURITY_FAMILIES_VERBOSE"):
            print("", *self.lines, sep="\n  ")
        print(f"\n{self.row()}")
        assert not self.failures, "\n".join(self.failures[:12])


def baseline(argv: Sequence[str], box: Sandbox, budget: Budget,
             env: Mapping[str, str] | None = None) -> float:
    """The command's peak memory on a small refused input: what the budget is added to."""
    return run_child(argv, box, budget, env=env).peak_mib
