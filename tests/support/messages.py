"""Whether a refusal line says what a test expects, after the line's own shortening.

`workloads.errors.one_line` keeps every refusal under 200 characters: a long path
(a pytest tmp_path is 70 characters and more) keeps only its end, the name of the
file. A test that asks for the whole message would fail on a long work folder
and pass on a short one, so it asks for the message with each path shortened the
same way: each short word whole, and each long word (a path, a file name) by its
last characters.
"""

from __future__ import annotations

from workloads.errors import TOKEN_KEPT

# one_line keeps at least two thirds of TOKEN_KEPT of a long word, less the "..." it prefixes.
END_KEPT = TOKEN_KEPT * 2 // 3 - 3


def says(line: str, expected: str) -> bool:
    """True if ``line`` holds each word of ``expected`` in order (a long word by its end)."""
    position = 0
    for word in expected.split():
        wanted = word[-END_KEPT:] if len(word) > END_KEPT else word
        found = line.find(wanted, position)
        if found < 0:
            return False
        position = found + len(wanted)
    return True
