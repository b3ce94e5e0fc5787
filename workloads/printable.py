"""Untrusted text as one printable line: the one way a record's field reaches a terminal or a file.

Why: a host name, a reason or a server's reason phrase comes from a machine we do
not control. Printed raw, ``ESC [ 2 J`` clears the terminal, ``ESC ] 52`` writes
the clipboard, ``BEL`` rings, a C1 byte (0x80-0x9f, e.g. ``\\x9b`` = CSI) does
what ``ESC [`` does on many terminals, and a bidi override (U+202E) shows
``gpu01\\u202eliaf`` as ``gpu01fail``; a Markdown file keeps all of it for the
next ``cat``. So every such field is shown here, visibly and reversibly, before
it is printed, logged or rendered (``tests/test_choke_points.py`` holds the
printing code to it):

* every character Python does not call printable (categories Cc, Cf, Cs, Co, Cn,
  Zl, Zp and every space but U+0020: control characters, bidi and other format
  characters, lone surrogates, unassigned code points, line breaks) becomes its
  escape, ``\\x1b``, ``\\u202e``, ``\\U000e0001``, so a person sees that it was
  there and what it was;
* a backslash becomes ``\\\\``, so an escape shown can not be mistaken for one
  typed by the host;
* the result is at most ``limit`` characters: its start, ``...``, and its end.

HTML needs escaping on top (``html.escape``): the renderers do both, this first.
"""

from __future__ import annotations

FIELD_MAX = 120  # a host name is at most 253 characters; a table cell need not show them all
_SHORTENED = "..."


def _escape(char: str) -> str:
    if char == "\\":
        return "\\\\"
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def line(text: object, limit: int = FIELD_MAX) -> str:
    """``text`` (``str()`` of it) as one printable line of at most ``limit`` characters.

    Only the first ``4 * limit`` characters are looked at (each becomes at most
    ten), so a field of megabytes costs no more than a short one; what is cut is
    shown as ``...`` in the middle, keeping the start and (more of) the end.
    """
    raw = text if isinstance(text, str) else str(text)
    if len(raw) > 4 * limit:
        head, tail = raw[: 2 * limit], raw[-2 * limit:]
        shown = "".join(map(_escape, head)) + _SHORTENED + "".join(map(_escape, tail))
    else:
        shown = "".join(map(_escape, raw))
    return shorten(shown, limit)


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters: its start, ``...``, and (twice as much of) its end."""
    if len(text) <= limit:
        return text
    if limit <= len(_SHORTENED):
        return text[:limit]
    head = (limit - len(_SHORTENED)) // 3
    tail = limit - len(_SHORTENED) - head
    return text[:head] + _SHORTENED + (text[-tail:] if tail else "")


def is_clean(text: str) -> bool:
    """True if ``text`` holds nothing :func:`line` would escape but line breaks (for tests)."""
    return all(c.isprintable() or c == "\n" for c in text)
