"""Issue 48, item 4, for the writers: links planted where the CLI writes, through the real CLI.

The family (the things and places of ``tests/workloads/test_planted_writers.py``):
each writer the CLI runs (``workloads report --fleet``, ``--history``, a records
report with its matplotlib figure) times each thing someone could leave where it
writes: a link, another user's link, a dangling link, a hard link to a file outside,
a fifo at the file's name; another user's link, or a link in a directory everyone may
write, in place of a directory of the output path. A fixed seed picks a few cases per
writer (two at the file, one on the way) so the suite stays short; the full product
runs in ``test_planted_writers.py``. Each case runs in a child held to ``RLIMIT_AS``
(:mod:`tests.security.harness`) and must exit 2 with one printable line of at most
200 characters, stay within the budgets (memory above the same command's peak
writing into a clean directory, wall time), and change nothing outside the trusted
directory (the victim's file, home and listing, snapshotted before and after).

Each writer is a family row of its own: their baselines differ (a records report
imports matplotlib and draws a figure; the fleet reports do not).

Not here, on purpose: the GPU monitor's CSV, the scaling study's CSV, the model
saved by Keras and the download cache have no command that writes them without a
GPU, a study of many runs, a training run or a mirror; they stay in process in
``test_planted_writers.py``, where each is driven through the same code the CLI
calls.

Before (issue 48, the tree at f11f556): figures went through ``savefig(path)``, the
reports were opened by name and directories were made with ``mkdir(parents=True)``
before any check: each of these wrote through the link. The tests run as root, the
victim; "another user" is uid 65534.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.security.harness import Budget, FamilyReport, Sandbox, baseline, run_child
from tests.workloads.test_planted_writers import (
    CLI_WRITERS,
    DEPTHS,
    FILE_KINDS,
    Outside,
    plant_at_file,
    plant_on_the_way,
)

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="planting another uid's links needs root"),
]
SEED = 48
AT_FILE = 2  # cases per writer with something planted at the file's name
ON_THE_WAY = ["another user's link", "a link in a directory everyone may write"]


def _cases(rng: random.Random) -> list[tuple[str, str]]:
    """A few (where, what) pairs: ``("file", kind)`` or ``("directory N", how)``."""
    at_file = [("file", kind) for kind in rng.sample(FILE_KINDS, AT_FILE)]
    return [*at_file, (f"directory {rng.choice(DEPTHS)}", rng.choice(ON_THE_WAY))]


@pytest.mark.parametrize("writer", list(CLI_WRITERS))
def test_planted_links_are_refused_within_budget(tmp_path: Path, writer: str) -> None:
    box = Sandbox.make(tmp_path)
    outside = Outside(box.outside / "victim")
    budget = Budget(memory_mib=256, wall_s=30)
    name, arguments = CLI_WRITERS[writer]
    report = FamilyReport(f"planted link (`workloads {writer}`)", budget)
    # The baseline is also the control: the same command writes into a clean directory.
    clean = box.trusted / "clean"
    argv = [*arguments(clean), "--output", str(clean / "out" / "a" / "b")]
    report.baseline_mib = baseline(argv, box, budget)
    assert (clean / "out" / "a" / "b" / name).is_file(), f"{writer} wrote nothing when clean"
    rng = random.Random(f"{SEED}:{writer}")
    for number, (where, kind) in enumerate(_cases(rng)):
        work = box.trusted / f"case{number}"
        work.mkdir(mode=0o755)
        output = work / "out" / "a" / "b"
        if where == "file":
            plant_at_file(kind, output / name, outside)
        else:
            plant_on_the_way(int(where.split()[1]), output, outside,
                             open_parent=kind.startswith("a link in"))
        report.add(f"{where}: {kind}",
                   run_child([*arguments(work), "--output", str(output)], box, budget))
    report.check()
