"""Host names and reasons from fleet records never reach a terminal or fleet.md as controls.

A host's record is written by the host: its ``host`` field and its ``error`` reason can
hold anything. Generated here (Hypothesis): text drawn from every C0 control (ESC, BEL,
NUL, CR, LF, TAB), DEL, every C1 control (0x80-0x9f, CSI among them), the bidi
overrides and isolates (U+202A-U+202E, U+2066-U+2069), line and paragraph separators,
and ordinary letters, as a host's name and as a failed host's reason. Through
``workloads report --fleet`` and ``--history`` (the CLI's entry point, in process for
the generated family, and once as a child process for the real stdout and stderr):
stdout, stderr, fleet.md, fleet.csv, fleet.json, fleet.html and history.html hold no
control or format character but the line breaks the report itself writes, and the
control characters show as escapes (``\\x1b``).

Before (issue 48): ``ESC``, ``BEL`` and C1 controls reached the terminal from both
commands, and fleet.md kept them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fleet.records import error_stub, record
from workloads.cli import main

REPO = Path(__file__).resolve().parents[2]
CONTROLS = ([chr(c) for c in range(0x20)] + ["\x7f"] + [chr(c) for c in range(0x80, 0xa0)]
            + [chr(c) for c in range(0x202a, 0x202f)] + [chr(c) for c in range(0x2066, 0x206a)]
            + ["\u2028", "\u2029", "\ufeff", "\u200e", "\u200f"])
UNTRUSTED = st.text(st.sampled_from(CONTROLS) | st.characters(min_codepoint=0x21,
                                                              max_codepoint=0x7e),
                    min_size=1, max_size=80)
OUTPUTS = ("fleet.md", "fleet.csv", "fleet.json", "fleet.html")


def clean(text: str) -> bool:
    """Nothing a terminal or a viewer acts on: only printable characters and line breaks."""
    return all(c.isprintable() or c == "\n" for c in text)


def _runs(root: Path, host: str, reason: str) -> Path:
    """Two runs of three hosts: `host` (named by its record) and a failed host with `reason`."""
    for number, day in ((1, 25), (2, 26)):
        run = root / f"run{number}"
        run.mkdir(parents=True)
        weird = record("ignored", gpus=1)
        weird["host"] = host
        weird["started_at"] = f"2026-11-{day}T00:00:00Z"
        (run / "a.json").write_text(json.dumps(weird))
        (run / "b.json").write_text(json.dumps(record("b", gpus=1)))
        (run / "c.json").write_text(json.dumps(record("c", gpus=1)))
        (run / "d.json").write_text(json.dumps(error_stub("d", reason)))
    return root


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(host=UNTRUSTED, reason=UNTRUSTED)
def test_no_control_character_reaches_the_terminal_or_the_reports(
        host: str, reason: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = _runs(Path(scratch) / "acceptance", host, reason)
        out = Path(scratch) / "out"
        for args, files in ((["--fleet", str(root / "run1"), "--output", str(out)], OUTPUTS),
                            (["--history", str(root), "--output", str(out)], ("history.html",))):
            stdout, stderr, code = _in_process(args)
            assert code == 0, stderr
            assert clean(stdout) and clean(stderr), (stdout, stderr)
            for name in files:
                text = (out / name).read_text(encoding="utf-8")
                assert clean(text), (name, [c for c in text if not clean(c)][:5])


def _in_process(args: list[str]) -> tuple[str, str, int]:
    """`workloads report ARGS` through the CLI's entry point, its stdout and stderr caught."""
    import contextlib
    import io

    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["report", *args])
    return stdout.getvalue(), stderr.getvalue(), code


def test_a_terminal_sees_escapes_not_controls(tmp_path: Path) -> None:
    """The real command in a child process: its bytes on stdout, as a terminal would get them."""
    host = "gpu07\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\x9b31m\u202eliaf"
    root = _runs(tmp_path / "acceptance", host, "down\x1b[1A\x1b[2Kpass\r")
    # A failed host is named on stdout: make the generated host fail, as an attacker would.
    for run in ("run1", "run2"):
        stub = error_stub(host, "unreachable\x1b[0m\x85")
        (root / run / "a.json").write_text(json.dumps(stub))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["--fleet", str(root / "run1"), "--output", str(tmp_path / "out")],
                 ["--history", str(root), "--output", str(tmp_path / "out")]):
        result = subprocess.run([sys.executable, "-m", "workloads", "report", *args],
                                capture_output=True, env=env, timeout=120, check=False)
        out, err = result.stdout.decode(), result.stderr.decode()
        assert result.returncode == 0, err
        assert clean(out) and clean(err), (out, err)
        assert "\\x1b[2J" in out  # shown, so a person sees what the host sent
    fleet_md = (tmp_path / "out" / "fleet.md").read_text()
    assert clean(fleet_md) and "gpu07\\x1b[2J" in fleet_md and "\\u202eliaf" in fleet_md


@pytest.mark.parametrize("char", CONTROLS)
def test_every_control_character_is_shown_by_its_escape(char: str) -> None:
    from workloads import printable

    shown = printable.line(f"a{char}b")
    assert clean(shown) and "\n" not in shown and shown != "ab" and shown.startswith("a\\")
