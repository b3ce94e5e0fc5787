"""Ansible filter: an apt_preferences(5) pattern that matches every value but one.

Why: the driver's branch pin (`Pin: version 580.*`) matches that branch's builds from
every origin, so a PPA's or Debian Backports' newer point release (580.172.08)
became the candidate over NVIDIA's 580.126.16. A record in front of it must give the
driver's packages from every origin but NVIDIA's repository a low priority, and apt
takes the first specific record that matches a version. apt's pins have no
negation (`o=!NVIDIA` is read as the origin "!NVIDIA"), but they take a POSIX
extended regular expression between slashes (apt-pkg's ExpressionMatches), so the
negation is spelled out:

    {{ 'NVIDIA' | apt_pin_other }}
    -> /^(.?.?.?.?.?|.......+|[^N].....|N[^V]....|NV[^I]...|NVI[^D]..|NVID[^I].|NVIDI[^A])$/

any value shorter or longer than "NVIDIA", or of its length and differing at some
character. No comma may appear in it: a comma separates the fields of a `Pin:
release` line (o=..., l=...), so the lengths are written as repeated `.?` and `.`,
never `{m,n}`. apt compares without case (regcomp's REG_ICASE), and so does the
pattern's complement. A value apt never sees (an empty Origin field) cannot be
matched by a `Pin: release` record at all: apt skips the record for such a file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Characters with a meaning in a POSIX extended regular expression outside brackets.
_SPECIAL = set(".[]()*+?{}|^$\\")


def _literal(char: str) -> str:
    return f"\\{char}" if char in _SPECIAL else char


def _not(char: str) -> str:
    """A bracket expression for every character but `char` (`]` first, `-` last, `^` not first)."""
    if char == "]":
        return "[^]]"
    return f"[^{char}]"


def apt_pin_other(value: str) -> str:
    """`/regex/` matching every string except `value` (apt_preferences(5), Pin: release o=/l=)."""
    text = str(value)
    if not text:
        return "/^.+$/"
    if "," in text or "/" in text or "\n" in text:
        raise ValueError(f"apt_pin_other: {text!r} has a comma, slash or newline, which an apt "
                         "pin cannot carry in a regular expression; use the repository's "
                         "Origin or Label as its Release file spells it")
    length = len(text)
    # Shorter (none for one character: apt never compares an empty value), then longer.
    alternatives = ([".?" * (length - 1)] if length > 1 else []) + ["." * (length + 1) + "+"]
    for index, char in enumerate(text):
        prefix = "".join(_literal(c) for c in text[:index])
        alternatives.append(prefix + _not(char) + "." * (length - index - 1))
    return "/^(" + "|".join(alternatives) + ")$/"


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"apt_pin_other": apt_pin_other}
