"""nvidia_driver_persistenced_unit: how the role reads the host's nvidia-persistenced unit.

The decision it feeds (write a drop-in that turns persistence on, link the unit
into multi-user.target) is taken from the unit the host has, so the reader is
tested on the three vendors' real units and on families of unit files and
command lines: comments, continuations, resets, blanks around `=`, sections in
any order, the flag pair in any order and quoting. The Ubuntu stand-in's reboot
test (tests/ansible/test_platforms.py) runs it through the role on real systemd.
"""

from __future__ import annotations

import functools
import shlex
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_plugin
from tests.fixtures import persistenced_units

ON, OFF = "--persistence-mode", "--no-persistence-mode"


@functools.cache
def _module() -> ModuleType:
    return load_plugin("persistenced_unit.py", role="nvidia_driver")


def read_unit(text: str) -> dict[str, Any]:
    found: Callable[[str], dict[str, Any]] = _module().FilterModule().filters()[
        "nvidia_driver_persistenced_unit"]
    return found(text)


def persistence_off(command: str) -> bool:
    return bool(_module().persistence_off(command))


def persistence_on(command: str) -> str:
    return str(_module().persistence_on(command))


# --- the vendors' units --------------------------------------------------------------

@pytest.mark.parametrize(("unit", "expected"), [
    pytest.param(persistenced_units.UBUNTU, {
        "exec_start": ["/usr/bin/nvidia-persistenced --user nvidia-persistenced "
                       "--no-persistence-mode --verbose"],
        "persistence_off": True,
        "exec_start_on": ["/usr/bin/nvidia-persistenced --user nvidia-persistenced "
                          "--persistence-mode --verbose"],
        "wanted_at_boot": False}, id="ubuntu"),
    pytest.param(persistenced_units.DEBIAN, {
        "exec_start": ["/usr/bin/nvidia-persistenced --user nvpd"],
        "persistence_off": False,
        "exec_start_on": ["/usr/bin/nvidia-persistenced --user nvpd"],
        "wanted_at_boot": True}, id="debian"),
    pytest.param(persistenced_units.EL9, {
        "exec_start": ["/usr/bin/nvidia-persistenced --verbose"],
        "persistence_off": False,
        "exec_start_on": ["/usr/bin/nvidia-persistenced --verbose"],
        "wanted_at_boot": True}, id="el9"),
])
def test_each_vendors_unit_is_read_as_it_runs(unit: str, expected: dict[str, Any]) -> None:
    assert read_unit(unit) == expected


def test_an_empty_or_missing_unit_has_nothing_to_change() -> None:
    assert read_unit("") == {"exec_start": [], "persistence_off": False, "exec_start_on": [],
                             "wanted_at_boot": False}


# --- command lines -------------------------------------------------------------------

_PLAIN = st.sampled_from(["--verbose", "-V", "--user nvidia-persistenced", "--user nvpd",
                          "--group video", "--uvm-persistence-mode", "--user root",
                          "--no-persistence-mode-x", "--persistence-modes",
                          "--user=--no-persistence-mode"])
# Words that carry the flag's text but are no flag: quoted inside a value, or an option's value.
_QUOTED_OTHER = st.sampled_from(['--user "nvidia persistenced"', "--user 'a --no-persistence-mode'",
                                 '--user "--no-persistence-mode"', "-u --no-persistence-mode",
                                 "--group --persistence-mode", r"--user a\ b"])
_FLAG = st.tuples(st.sampled_from([ON, OFF]), st.sampled_from(["", '"', "'"]))
_BLANK = st.sampled_from([" ", "  ", "\t", " \t "])


@st.composite
def command_parts(draw: st.DrawFn) -> tuple[list[str], list[str], list[str]]:
    """An ExecStart command line's parts (binary, options; each one or two words), the
    persistence flags among them in order, and the words the drop-in's command must have
    (the contract of persistence_on, word by word)."""
    binary = draw(st.sampled_from(["/usr/bin/nvidia-persistenced",
                                   "-/usr/bin/nvidia-persistenced"]))
    parts, flags, fixed, fixed_flags = [binary], [], [binary.lstrip("-")], []
    for kind in draw(st.lists(st.sampled_from(["plain", "quoted", "flag"]), max_size=8)):
        if kind == "flag":
            flag, quote = draw(_FLAG)
            part = f"{quote}{flag}{quote}"
            # A plainly written --no-persistence-mode is replaced; a quoted one stays.
            flags.append(flag)
            fixed_flags.append(ON if part == OFF else flag)
            fixed.append(fixed_flags[-1])
        else:
            part = draw(_PLAIN if kind == "plain" else _QUOTED_OTHER)
            fixed += shlex.split(part)
        parts.append(part)
    if fixed_flags and fixed_flags[-1] == OFF:  # still off: --persistence-mode is appended
        fixed.append(ON)
    return parts, flags, fixed


@st.composite
def command_lines(draw: st.DrawFn) -> tuple[str, list[str], list[str]]:
    """command_parts joined by blanks of any kind."""
    parts, flags, fixed = draw(command_parts())
    return parts[0] + "".join(draw(_BLANK) + part for part in parts[1:]), flags, fixed


@given(command_lines())
def test_the_last_flag_decides_and_the_drop_in_command_turns_persistence_on(
        case: tuple[str, list[str], list[str]]) -> None:
    command, flags, expected = case
    assert persistence_off(command) == (bool(flags) and flags[-1] == OFF)
    fixed = persistence_on(command)
    assert not persistence_off(fixed)
    # Every other word stays as the vendor wrote it (the user, the "-" prefix, quoting).
    assert shlex.split(fixed.lstrip("-")) == expected
    if OFF not in flags:
        assert fixed == command


# --- unit files ----------------------------------------------------------------------

_COMMENT = st.sampled_from(["# a comment", "; another",
                            "#ExecStart=/bin/false --no-persistence-mode"])


def _assignment(key: str, value: str, blanks: tuple[str, str]) -> str:
    return f"{key}{blanks[0]}={blanks[1]}{value}"


@st.composite
def unit_files(draw: st.DrawFn) -> tuple[str, str, bool]:
    """(a unit file, the command its ExecStart runs, whether [Install] wants it at boot)."""
    parts, _, _ = draw(command_parts())
    command = " ".join(parts)
    blanks = st.tuples(st.sampled_from(["", " "]), st.sampled_from(["", " "]))
    # The command may be wrapped with backslash continuations (between its parts; a
    # comment line may come in between).
    cut = draw(st.integers(min_value=1, max_value=len(parts)))
    head, tail = " ".join(parts[:cut]), " ".join(parts[cut:])
    exec_lines = [_assignment("ExecStart", head, draw(blanks))]
    if tail:
        exec_lines[0] += " \\"
        if draw(st.booleans()):  # a comment line inside a continuation is skipped
            exec_lines.append(draw(_COMMENT))
        exec_lines.append("    " + tail)
    continued = set(exec_lines[1:])
    service = ["[Service]", _assignment("Type", "forking", draw(blanks))]
    if draw(st.booleans()):  # an earlier command, then the reset a drop-in would write
        service += [_assignment("ExecStart", "/bin/true --no-persistence-mode", draw(blanks)),
                    _assignment("ExecStart", "", draw(blanks))]
    service += exec_lines
    service.append(_assignment("ExecStopPost", "/bin/rm -rf /var/run/nvidia-persistenced",
                               draw(blanks)))
    unit = ["[Unit]", "Description=NVIDIA Persistence Daemon", "Wants=syslog.target"]
    install_kind = draw(st.sampled_from(["none", "wanted", "required", "upheld", "alias",
                                         "empty"]))
    install = {"none": [], "wanted": ["[Install]", "WantedBy=multi-user.target"],
               "required": ["[Install]", "RequiredBy=nvidia.service"],
               "upheld": ["[Install]", "UpheldBy=multi-user.target"],
               "alias": ["[Install]", "Alias=nvidia-pd.service"],
               "empty": ["[Install]", "WantedBy="]}[install_kind]
    sections = draw(st.permutations([unit, service, install]))
    lines: list[str] = []
    for section in sections:
        for line in section:
            # An empty line would end a continuation: only between whole assignments.
            if line not in continued and draw(st.integers(min_value=0, max_value=5)) == 0:
                lines.append(draw(st.sampled_from(["", draw(_COMMENT)])))
            lines.append(line)
        lines.append("")
    return "\n".join(lines), command, install_kind in ("wanted", "required", "upheld")


@given(unit_files())
def test_the_unit_is_read_as_systemd_reads_it(case: tuple[str, str, bool]) -> None:
    text, command, wanted = case
    read = read_unit(text)
    assert [shlex.split(found) for found in read["exec_start"]] == [shlex.split(command)], text
    assert read["persistence_off"] == persistence_off(command)
    assert not any(persistence_off(found) for found in read["exec_start_on"])
    assert read["wanted_at_boot"] is wanted
