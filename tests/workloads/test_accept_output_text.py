"""The verdict table shows a finding's text as it is: a kernel log line quoted in a reason
(an XID names the process, whose name the host's users choose) or a device label reaches
the operator's terminal with its control characters escaped and its brackets as brackets,
never as rich markup, in the wide table, the two-line form and the p2p matrix."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from workloads.accept import output
from workloads.accept.battery import Outcome
from workloads.accept.checks import sizes
from workloads.accept.verdicts import FAIL, Finding

HOSTILE = [
    "\x1b[2J\x1b[H", "\x1b]52;c;cm0gLXJmIC8=\x07", "\x07", "\x9b31m", "gpu01\u202eliaf",
    "[bold red]PASS[/]", "[link=http://127.0.0.1/]x[/link]", "a\nb\rc", "\x00\x7f",
]


def _outcome(text: str) -> Outcome:
    finding = Finding("errors", f"GPU 0 {text}", f"XID {text}", FAIL,
                      f"XID 13 pid=1, name={text}: reset the GPU")
    return Outcome(findings=[finding], backend="jax", devices=[],
                   sizes=sizes(on_gpu=False, quick=True))


def _rendered(outcome: Outcome, width: int) -> str:
    sink = io.StringIO()
    console = Console(file=sink, width=width, force_terminal=False, color_system=None)
    if width >= output.WIDE:
        console.print(output._table(outcome, "acceptance"))
    else:
        output._lines(console, outcome, "acceptance")
    return sink.getvalue()


def _shown_as_is(text: str, rendered: str) -> None:
    assert not any(ch in rendered for ch in "\x1b\x07\x9b\u202e\x00\x7f\r"), repr(rendered)
    if "[" in text:
        assert "[" in rendered  # the brackets are shown, not taken as markup


@pytest.mark.parametrize("width", [200, 80])
@pytest.mark.parametrize("text", HOSTILE)
def test_a_findings_text_reaches_the_terminal_escaped(text: str, width: int) -> None:
    _shown_as_is(text, _rendered(_outcome(text), width))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.text(min_size=1, max_size=40))
def test_any_text_is_shown_without_control_characters(text: str) -> None:
    for width in (200, 80):
        rendered = _rendered(_outcome(text), width)
        assert all(ch == "\n" or ch.isprintable() for ch in rendered), repr(rendered)
