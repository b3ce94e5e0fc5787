"""Issue 48, item 4, for untrusted text: hostile host names and reasons, through the real CLI.

The family (the characters of ``tests/fleet/test_untrusted_text.py``): text drawn,
by a fixed seed, from every C0 control (ESC, BEL, NUL, CR, LF, TAB), DEL, every C1
control (CSI among them), the bidi overrides and isolates, the line and paragraph
separators, and ordinary letters, each string holding at least one of them. Each
case is two runs of four hosts: one failed host named by a generated name with a
generated reason (a failed host is named on stdout), and one healthy host whose
record names it by another. ``workloads report --fleet`` and ``--history`` run on
it in a child held to ``RLIMIT_AS`` (:mod:`tests.security.harness`).

The contract differs from the readers' and writers': a report over hostile names is
a report, not a refusal, so exit 0 is the right outcome. What is asserted instead
(:func:`tests.security.harness.printed_problems`): no control, C1 or format
character reaches stdout, stderr or any written report (fleet.md, fleet.csv,
fleet.json, fleet.html, history.html), peak memory within the budget above the same
command's peak on plain names, wall time within its budget, and nothing changed
outside the trusted directory. A few cases, not the Hypothesis run of
``test_untrusted_text.py``, which explores the alphabet in process.

Before (issue 48, the tree at f11f556): ESC, BEL and C1 controls reached the
terminal from both commands, and fleet.md kept them.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.fleet.records import error_stub, record
from tests.security.harness import (
    Budget,
    FamilyReport,
    Sandbox,
    baseline,
    printed_problems,
    run_child,
    unprintable,
)

pytestmark = pytest.mark.timeout(600)
SEED = 48
CASES = 3
CONTROLS = ([chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xa0)]
            + [chr(c) for c in range(0x202a, 0x202f)] + [chr(c) for c in range(0x2066, 0x206a)]
            + ["\u2028", "\u2029", "\ufeff", "\u200e", "\u200f"])
LETTERS = [chr(c) for c in range(0x21, 0x7f)]
COMMANDS = {
    "report --fleet": (lambda runs: ["--fleet", str(runs / "run1")],
                       ("fleet.md", "fleet.csv", "fleet.json", "fleet.html")),
    "report --history": (lambda runs: ["--history", str(runs)], ("history.html",)),
}


def untrusted(rng: random.Random) -> str:
    """1 to 60 characters, half of them controls on average, at least one control."""
    size = rng.randint(1, 60)
    text = [rng.choice(CONTROLS if rng.random() < 0.5 else LETTERS) for _ in range(size)]
    text[rng.randrange(size)] = rng.choice(CONTROLS)
    return "".join(text)


def _runs(root: Path, failed: str, reason: str, healthy: str) -> Path:
    """Two runs of four hosts: ``failed`` (with ``reason``), ``healthy``, two plain ones."""
    for number, day in ((1, 25), (2, 26)):
        run = root / f"run{number}"
        run.mkdir(parents=True)
        (run / "a.json").write_text(json.dumps(error_stub(failed, reason)))
        named = record("ignored", gpus=1)
        named["host"] = healthy
        named["started_at"] = f"2026-11-{day}T00:00:00Z"
        (run / "d.json").write_text(json.dumps(named))
        for host in ("b", "c"):
            plain = record(host, gpus=1)
            plain["started_at"] = f"2026-11-{day}T00:00:00Z"
            (run / f"{host}.json").write_text(json.dumps(plain))
    return root


def _written(output: Path, names: tuple[str, ...]) -> list[str]:
    """How the reports written miss the contract: absent, or holding a control character."""
    found = []
    for name in names:
        path = output / name
        if not path.is_file():
            found.append(f"{name} not written")
        elif bad := unprintable(path.read_text(encoding="utf-8", errors="replace")):
            found.append(f"{name} holds control characters {bad[:5]!r}")
    return found


@pytest.mark.parametrize("command", list(COMMANDS))
def test_hostile_names_are_shown_not_sent_within_budget(tmp_path: Path, command: str) -> None:
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=20)
    arguments, written = COMMANDS[command]
    report = FamilyReport(f"untrusted text (`workloads {command}`, exit 0)", budget,
                          contract=printed_problems)
    plain = _runs(box.trusted / "plain", "e", "unreachable", "f")
    report.baseline_mib = baseline(
        ["report", *arguments(plain), "--output", str(box.trusted / "plain-out")], box, budget)
    rng = random.Random(SEED)
    for number in range(CASES):
        failed, reason, healthy = untrusted(rng), untrusted(rng), untrusted(rng)
        runs = _runs(box.trusted / f"case{number}", failed, reason, healthy)
        output = box.trusted / f"case{number}-out"
        outcome = run_child(["report", *arguments(runs), "--output", str(output)], box, budget)
        report.add(f"{failed!r} ({reason!r}), {healthy!r}", outcome, _written(output, written))
    report.check()
