"""Ansible filters: add a component (contrib) to the host's own Debian source entries.

Why: NVIDIA's debian12 driver packages depend on packages of Debian's contrib
component (libcuda1 on nvidia-support, as in Debian's own packaging of the
driver), and a Debian install enables main only. NVIDIA's guide runs
`add-apt-repository contrib`, which adds the component to the existing entries.
A separate sources file for contrib would be simpler to write and is wrong:
apt requires one Signed-By per repository and suite, and a second entry for
the same mirror without the first one's Signed-By (or with another) stops
every apt command ("Conflicting values set for option Signed-By"). So the
component goes into the entries that are there, in their own file and format.

    {{ targets.stdout_lines | apt_entries_lacking('contrib', 'Debian', 'main') }}
    -> ["/etc/apt/sources.list:1"]
    {{ text | apt_sources_add_component('/etc/apt/sources.list', [1], 'contrib') }}

`targets` is `apt-get indextargets --format
'$(SOURCESENTRY) $(REPO_URI) $(RELEASE) $(COMPONENT) $(ORIGIN)' 'Identifier: Packages'`:
the indexes apt has on disk, each with the entry ("FILE:N") it comes from; N
counts lines in a one-line `.list` file and stanzas in a deb822 `.sources` file.
The origin is last: it may hold spaces ("Google LLC").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

# A one-line entry: type, [options] (spaces allowed inside), URI, suite; components follow.
ONE_LINE = re.compile(r"^\s*deb(?:-src)?\s+(?:\[[^\]]*\]\s*)?\S+\s+\S+(?P<components>(?:\s+\S+)*)")


def apt_entries_lacking(lines: Iterable[str], component: str, origin: str = "Debian",
                        beside: str = "main") -> list[str]:
    """Entries with an index of `beside` from `origin` but none of `component` for that suite."""
    present: set[tuple[str, str]] = set()
    candidates: dict[tuple[str, str], set[str]] = {}
    for line in lines:
        fields = str(line).split(" ", 4)
        if len(fields) != 5 or fields[4] != origin:
            continue  # not the origin's, or no Release file read yet ("$(ORIGIN)")
        entry, uri, suite, found = fields[0], fields[1], fields[2], fields[3]
        if found == component:
            present.add((uri, suite))
        elif found == beside:
            candidates.setdefault((uri, suite), set()).add(entry)
    return sorted(entry for key, entries in candidates.items() if key not in present
                  for entry in entries)


def _add_to_line(line: str, component: str) -> str:
    """One-line entry: the component after the others, before any trailing comment."""
    ending = line[len(line.rstrip("\r\n")):]
    body, hash_, comment = line[:len(line) - len(ending)].partition("#")
    match = ONE_LINE.match(body)
    if match is None or component in match["components"].split():
        return line
    stripped = body.rstrip()
    return f"{stripped} {component}{body[len(stripped):]}{hash_}{comment}{ending}"


def _stanza_starts(lines: list[str]) -> list[int]:
    """Index of each deb822 stanza's first line, counted as apt counts them.

    Comment lines ("#" first) are not part of any stanza; blank lines end one.
    """
    starts, inside = [], False
    for index, line in enumerate(lines):
        if line.lstrip().startswith("#"):
            continue
        if not line.strip():
            inside = False
        elif not inside:
            starts.append(index)
            inside = True
    return starts


def _add_to_stanza(lines: list[str], start: int, component: str) -> None:
    """deb822 stanza: the component at the end of its Components field (continuations too)."""
    field_end = None
    index = start
    while index < len(lines) and lines[index].strip():
        line = lines[index]
        if line.lstrip().startswith("#"):
            index += 1
            continue
        if re.match(r"(?i)components\s*:", line):
            field_end = index
            values = line.split(":", 1)[1].split()
            index += 1
            while index < len(lines) and lines[index][:1] in (" ", "\t") and lines[index].strip():
                if not lines[index].lstrip().startswith("#"):
                    field_end = index
                    values += lines[index].split()
                index += 1
            if component in values:
                return
            continue
        index += 1
    if field_end is None:
        return
    last = lines[field_end]
    ending = last[len(last.rstrip("\r\n")):]
    lines[field_end] = f"{last.rstrip()} {component}{ending}"


def apt_sources_add_component(text: str, path: str, numbers: Iterable[Any],
                              component: str) -> str:
    """`text` (the file at `path`) with `component` added to its entries `numbers`."""
    lines = str(text).splitlines(keepends=True)
    wanted = {int(number) for number in numbers}
    if str(path).endswith(".sources"):
        starts = _stanza_starts(lines)
        for number in sorted(wanted):
            if 1 <= number <= len(starts):
                _add_to_stanza(lines, starts[number - 1], component)
    else:
        for number in wanted:
            if 1 <= number <= len(lines):
                lines[number - 1] = _add_to_line(lines[number - 1], component)
    return "".join(lines)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"apt_entries_lacking": apt_entries_lacking,
                "apt_sources_add_component": apt_sources_add_component}
