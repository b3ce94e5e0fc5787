"""The one exception type users see: a problem and its fix, printed as one line.

Every command raises :class:`WorkloadError` for bad input or a failed precondition;
the CLI turns it into ``workloads <cmd>: error: <problem>; <fix>`` on stderr and
exit code 2, never a traceback. Keeping problem and fix separate makes it hard to
write an error message that forgets to say what to do.

A message often quotes what it refuses (a path, a label, a peer's name), and that
text comes from outside: so :meth:`WorkloadError.one_line` makes it one printable
line of at most :data:`LINE_MAX` characters whatever it holds (the problem is
shortened first, so the fix always survives), and :func:`brief` renders an
untrusted value for a message without converting an unbounded integer to decimal
(which is quadratic, and refused by Python past 4300 digits).
"""

from __future__ import annotations

from typing import Any

from workloads import printable as _printable

# The longest "workloads <command>: error: " prefix is 32 characters: the printed line
# stays under 200 with this.
LINE_MAX = 169
_SHORTENED = "..."
INT_DIGITS_SHOWN = 18  # |n| below 10**18 is written out; larger ones by their size


class WorkloadError(Exception):
    """A user-facing failure with a one-line explanation and a suggested fix."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem.rstrip(".")
        self.fix = fix.rstrip(".") if fix else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """``problem; fix`` on one printable line of at most :data:`LINE_MAX` characters."""
        return one_line(self.problem, self.fix)


class OutOfMemory(WorkloadError):
    """The accelerator (or host) ran out of memory; exit code 3 so sweeps can tell."""

    exit_code = 3


def printable(text: str) -> str:
    """``text`` on one line: whitespace runs become one space, other controls their escape.

    The escaping is :mod:`workloads.printable`'s (``ESC`` shows as ``\\x1b``); the
    length is left to the caller, who shortens the whole line.
    """
    words = " ".join(text.split())
    return _printable.line(words, limit=max(len(words) * 10, 1))


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters: its start and (twice as much of) its end."""
    if len(text) <= limit:
        return text
    if limit <= len(_SHORTENED):
        return text[:limit]
    head = (limit - len(_SHORTENED)) // 3  # messages end with what was found: keep more of it
    tail = limit - len(_SHORTENED) - head
    return text[:head] + _SHORTENED + (text[-tail:] if tail else "")


TOKEN_KEPT = 24  # a long path or URL keeps its last 24 characters (the file's name)


def _shorten_tokens(text: str, excess: int) -> str:
    """``text`` with its longest words (paths, URLs, quoted values) cut from the front.

    Paths and URLs (words with a ``/``) go first, each keeping at least its last
    :data:`TOKEN_KEPT` characters (two thirds of that if the line is still too
    long), so a path still ends in the file's name; other long words only then.
    """
    words = text.split(" ")
    for kept, paths_only in ((TOKEN_KEPT, True), (TOKEN_KEPT * 2 // 3, True),
                             (TOKEN_KEPT, False)):
        for index in sorted(range(len(words)), key=lambda i: -len(words[i])):
            if excess <= 0 or len(words[index]) <= kept:
                break
            if paths_only and "/" not in words[index]:
                continue
            keep = max(kept, len(words[index]) - excess) - len(_SHORTENED)
            excess -= len(words[index]) - keep - len(_SHORTENED)
            words[index] = _SHORTENED + words[index][-keep:]
    return " ".join(words)


def one_line(problem: str, fix: str | None = None, limit: int = LINE_MAX) -> str:
    """``problem; fix`` as one printable line of at most ``limit`` characters.

    A long line first loses the front of its longest words (paths, URLs and quoted
    values from outside), then the middle of its problem, and only if the fix alone
    is too long, the middle of the fix.
    """
    problem = printable(problem)
    fix = printable(fix) if fix else ""
    excess = len(problem) + (len(fix) + 2 if fix else 0) - limit
    if excess > 0:  # the long words of both: a path in the fix goes before the problem's words
        problem, _, fix = _shorten_tokens(f"{problem} \0 {fix}", excess).partition(" \0 ")
    if not fix:
        return shorten(problem, limit)
    room = limit - len(fix) - 2
    if room >= 40 or len(problem) <= room:
        return f"{shorten(problem, max(room, 0))}; {fix}"
    problem = shorten(problem, min(len(problem), limit // 2))
    return f"{problem}; {shorten(fix, limit - len(problem) - 2)}"


def clip(text: str, limit: int = 60) -> str:
    """Untrusted text for a message, unquoted: one printable line of at most ``limit``."""
    return shorten(printable(text), limit)


def brief(value: Any, limit: int = 60, _depth: int = 0) -> str:
    """A short rendering of an untrusted value for a message, in bounded time.

    Integers of more than :data:`INT_DIGITS_SHOWN` digits are shown by their size in
    bits (``int.bit_length`` is constant time; ``str`` of a huge int is not, and
    raises past 4300 digits); containers show their first items and their length;
    text is cut. Never raises, whatever ``value`` is.
    """
    try:
        text = _brief(value, limit, _depth)
    except Exception:  # an object whose repr fails: say what it is
        text = f"<{type(value).__name__}>"
    return printable(text) if len(text) <= limit else shorten(printable(text), limit)


def _brief(value: Any, limit: int, depth: int) -> str:
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if -(10**INT_DIGITS_SHOWN) < value < 10**INT_DIGITS_SHOWN:
            return str(int(value))
        sign = "-" if value < 0 else ""
        return f"{sign}<an integer of {abs(value).bit_length()} bits>"
    if isinstance(value, str | bytes | bytearray):
        return repr(value[:limit])
    if isinstance(value, tuple | list):
        if depth >= 2:
            return f"<{type(value).__name__} of {len(value)}>"
        items = [brief(item, limit // 2, depth + 1) for item in value[:4]]
        more = ", ..." if len(value) > 4 else ""
        inner = ", ".join(items) + more
        if isinstance(value, tuple):
            return f"({inner}{',' if len(value) == 1 else ''})"
        return f"[{inner}]"
    if isinstance(value, float):
        return repr(value)
    return f"<{type(value).__name__}>"


def is_out_of_memory(exc: BaseException) -> bool:
    """Recognise OOM errors of TensorFlow, JAX and PyTorch without importing them."""
    name = type(exc).__name__
    if name in {"ResourceExhaustedError", "OutOfMemoryError"}:
        return True
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
