"""Ansible filter: what an installed nvidia-persistenced.service needs to keep persistence on.

Why: the vendors ship three different units for the same daemon. NVIDIA's EL9 rpm
and Debian's package (which NVIDIA's debian12 repository follows) start it with
persistence mode on (the daemon's default) and carry `[Install]
WantedBy=multi-user.target`, so `systemctl enable` is all it takes. Ubuntu's
nvidia-compute-utils-<branch> unit is static (no [Install]; a udev rule starts it
when the driver binds) and runs `--no-persistence-mode`: enabling it does
nothing, and `nvidia-smi -pm 1` is lost at the next boot. The role reads the unit
the host has, rather than guessing from the OS, and writes a drop-in (ExecStart,
[Install]) only where the unit needs one.

    {{ unit_text | nvidia_driver_persistenced_unit }}
    -> {"exec_start": ["/usr/bin/nvidia-persistenced --user nvidia-persistenced
                        --no-persistence-mode --verbose"],
        "persistence_off": true,
        "exec_start_on": ["/usr/bin/nvidia-persistenced --user nvidia-persistenced
                           --persistence-mode --verbose"],
        "wanted_at_boot": false}

The unit syntax read is systemd's (systemd.syntax(7)): `[Section]` headers,
`Key=Value` lines with optional blanks around `=`, `#`/`;` comment lines, a
trailing backslash continuing a line, and an empty `ExecStart=` resetting the
list. The daemon's `--persistence-mode`/`--no-persistence-mode` pair is one
boolean option (nvidia-persistenced's option table): the last one given wins.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

FLAG_ON = "--persistence-mode"
FLAG_OFF = "--no-persistence-mode"
# nvidia-persistenced's options that take the next word as their value (option-table.h).
_VALUE_OPTIONS = ("-u", "--user", "-g", "--group", "--nvidia-cfg-path")
# [Install] keys that make `systemctl enable` pull the unit in at boot (Alias= and Also= do not).
_BOOT_KEYS = ("WantedBy", "RequiredBy", "UpheldBy")


def _logical_lines(text: str) -> list[str]:
    """The unit's lines with backslash continuations joined and comments dropped."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped[:1] in ("#", ";"):  # also inside a continuation, as systemd reads it
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    if pending:
        lines.append(pending)
    return lines


def _sections(text: str) -> dict[str, list[tuple[str, str]]]:
    """section name -> its (key, value) assignments, in order."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] | None = None
    for line in _logical_lines(text):
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1].strip(), [])
        elif "=" in line and current is not None:
            key, value = line.split("=", 1)
            current.append((key.strip(), value.strip()))
    return sections


def _raw_word_spans(command: str) -> list[tuple[int, int]]:
    """(start, end) of each word of the command line as written, quotes and escapes kept."""
    spans: list[tuple[int, int]] = []
    index, size = 0, len(command)
    while index < size:
        if command[index].isspace():
            index += 1
            continue
        start, quote = index, ""
        while index < size and (quote or not command[index].isspace()):
            char = command[index]
            if char == "\\" and quote != "'":
                index += 2
                continue
            if quote and char == quote:
                quote = ""
            elif not quote and char in "\"'":
                quote = char
            index += 1
        spans.append((start, min(index, size)))
    return spans


def _flag_words(command: str) -> list[tuple[int, int, str]]:
    """(start, end, word) of each --persistence-mode / --no-persistence-mode the daemon sees.

    Words are unquoted as systemd does it (like a shell). The first word is the
    binary, and the value of an option that takes one (--user X) is no option,
    whatever it says.
    """
    found: list[tuple[int, int, str]] = []
    takes_value = True  # the binary
    for start, end in _raw_word_spans(command):
        raw = command[start:end]
        try:
            word = "".join(shlex.split(raw))
        except ValueError:  # an unbalanced quote (systemd refuses the line): as written
            word = raw
        if takes_value:
            takes_value = False
            continue
        takes_value = word in _VALUE_OPTIONS
        if word in (FLAG_ON, FLAG_OFF):
            found.append((start, end, word))
    return found


def persistence_off(command: str) -> bool:
    """True when this ExecStart command line starts the daemon with persistence mode off."""
    flags = _flag_words(command)
    return bool(flags) and flags[-1][2] == FLAG_OFF


def persistence_on(command: str) -> str:
    """The command line with persistence mode on and every other word as it was written.

    Each --no-persistence-mode written plainly becomes --persistence-mode; where the
    flag is written otherwise (quoted), --persistence-mode is appended: the last wins.
    """
    for start, end, _ in reversed(_flag_words(command)):
        if command[start:end] == FLAG_OFF:
            command = command[:start] + FLAG_ON + command[end:]
    return f"{command} {FLAG_ON}" if persistence_off(command) else command


def persistenced_unit(text: str) -> dict[str, Any]:
    """Read an nvidia-persistenced unit file: its ExecStart, persistence mode and boot wiring."""
    sections = _sections(str(text))
    exec_start: list[str] = []
    for key, value in sections.get("Service", []):
        if key == "ExecStart":
            exec_start = [*exec_start, value] if value else []
    wanted = any(key in _BOOT_KEYS and value.split()
                 for key, value in sections.get("Install", []))
    return {
        "exec_start": exec_start,
        "persistence_off": any(persistence_off(command) for command in exec_start),
        "exec_start_on": [persistence_on(command) for command in exec_start],
        "wanted_at_boot": wanted,
    }


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"nvidia_driver_persistenced_unit": persistenced_unit}
