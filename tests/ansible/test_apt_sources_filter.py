"""apt_entries_lacking / apt_sources_add_component: contrib into the host's Debian entries.

The edited files are checked by apt itself: `apt-get indextargets --no-release-info`
lists every index apt would fetch for a sources file, with the entry it comes from,
without any network. For a generated family of one-line and deb822 files (comments,
blank lines, options, continuation lines, several suites per stanza), adding contrib
to some entries must give apt exactly the old indexes plus contrib for those entries'
suites, nothing else, and a second pass must change nothing. The role runs the
filters on the Debian 12 converge (tests/ansible/test_site.py).
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters

FILTERS = load_filters("apt_sources.py")
apt_entries_lacking = FILTERS["apt_entries_lacking"]
apt_sources_add_component = FILTERS["apt_sources_add_component"]

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# Each mirror with the options every entry of it carries (apt wants one Signed-By per source).
MIRRORS = {"http://deb.debian.org/debian": f"signed-by={KEYRING}",
           "http://deb.debian.org/debian-security": "",
           "http://mirror.example.invalid/debian": "arch=amd64"}
SUITES = ["bookworm", "bookworm-updates", "bookworm-security", "bookworm-backports"]
COMPONENTS = ["main", "contrib", "non-free", "non-free-firmware"]
Target = tuple[str, str, str, str, str]  # (entry, mirror, deb or deb-src, suite, component)


def _targets(path: Path) -> set[Target]:
    """What apt makes of a sources file: every index, with the entry ("FILE:N") it is from.

    An index two entries configure is listed once, for the first of them.
    """
    with tempfile.TemporaryDirectory() as lists:
        listed = subprocess.run(
            ["apt-get", "-o", f"Dir::Etc::SourceList={path}", "-o",
             "Dir::Etc::SourceParts=/nonexistent", "-o", f"Dir::State::Lists={lists}",
             "indextargets", "--no-release-info", "--format",
             "$(SOURCESENTRY)\t$(REPO_URI)\t$(TARGET_OF)\t$(RELEASE)\t$(COMPONENT)"],
            capture_output=True, text=True, check=True)
    assert "E:" not in listed.stderr, listed.stderr
    return {(a.rsplit(":", 1)[1], b, c, d, e)
            for a, b, c, d, e in (line.split("\t") for line in listed.stdout.splitlines())}


gap = st.sampled_from([" ", "  ", "\t"])
comment = st.sampled_from(["# a comment", "#deb http://old.invalid/debian buster main", "#"])


@st.composite
def one_line_entry(draw: st.DrawFn) -> str:
    uri = draw(st.sampled_from(sorted(MIRRORS)))
    options = f"[{MIRRORS[uri]}]{draw(gap)}" if MIRRORS[uri] else ""
    components = draw(st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=3,
                               unique=True))
    trailer = draw(st.sampled_from(["", " # keep", "\t#note"]))
    kind = draw(st.sampled_from(["deb", "deb", "deb-src"]))
    return (f"{kind}{draw(gap)}{options}{uri}{draw(gap)}{draw(st.sampled_from(SUITES))}"
            f"{draw(gap)}{draw(gap).join(components)}{trailer}")


one_line_file = st.lists(st.one_of(one_line_entry(), comment, st.just("")), min_size=1,
                         max_size=8).map(lambda lines: "\n".join(lines) + "\n")


@st.composite
def stanza(draw: st.DrawFn) -> str:
    uri = draw(st.sampled_from(sorted(MIRRORS)))
    suites = draw(st.lists(st.sampled_from(SUITES), min_size=1, max_size=2, unique=True))
    components = draw(st.lists(st.sampled_from(COMPONENTS), min_size=1, max_size=3,
                               unique=True))
    split = draw(st.integers(min_value=1, max_value=len(components)))
    value = " ".join(components[:split]) + "".join(
        f"\n {name}" for name in components[split:])
    fields = [f"Types: {draw(st.sampled_from(['deb', 'deb deb-src']))}", f"URIs: {uri}",
              f"Suites: {' '.join(suites)}",
              f"{draw(st.sampled_from(['Components', 'components']))}:{draw(gap)}{value}"]
    if MIRRORS[uri].startswith("signed-by="):
        fields.append(f"Signed-By: {KEYRING}")
    order = draw(st.permutations(fields))
    if draw(st.booleans()):
        order.insert(draw(st.integers(0, len(order))), draw(comment))
    return "\n".join(order)


def _join_stanzas(parts: list[tuple[str, str]]) -> str:
    """Stanzas with one or more blank lines (and maybe a comment) between them."""
    return "\n".join(text + separator for text, separator in parts)


deb822_file = st.lists(st.tuples(stanza(), st.sampled_from(["\n", "\n\n", "\n# between\n\n"])),
                       min_size=1, max_size=4).map(_join_stanzas)


def _check(text: str, suffix: str, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"test{suffix}"
        path.write_text(text)
        before = _targets(path)
        entries = sorted({int(entry) for entry, _, kind, _, _ in before if kind == "deb"})
        chosen = data.draw(st.lists(st.sampled_from(entries), unique=True) if entries
                           else st.just([]))
        edited = apt_sources_add_component(text, str(path), chosen, "contrib")
        path.write_text(edited)
        after = _targets(path)
        assert apt_sources_add_component(edited, str(path), chosen, "contrib") == edited
    # Per mirror, kind and suite: the old indexes, plus contrib where an entry was chosen.
    added = {(mirror, kind, suite, "contrib") for entry, mirror, kind, suite, _ in before
             if int(entry) in chosen}
    old = {target[1:] for target in before}
    assert {target[1:] for target in after} == old | added, f"{text!r} -> {edited!r}"
    # And a new index comes from an entry that was chosen, not from a neighbour.
    assert {int(t[0]) for t in after if t[1:] not in old} <= set(chosen), f"{edited!r}"


@settings(max_examples=25)
@given(one_line_file, st.data())
def test_contrib_goes_into_the_chosen_one_line_entries_only(text: str,
                                                             data: st.DataObject) -> None:
    _check(text, ".list", data)


@settings(max_examples=25)
@given(deb822_file, st.data())
def test_contrib_goes_into_the_chosen_deb822_stanzas_only(text: str, data: st.DataObject) -> None:
    _check(text, ".sources", data)


def test_the_host_debian_entries_without_contrib_are_found() -> None:
    """Only the origin's entries, only suites without contrib, not before a Release was read."""
    lines = [
        "/etc/apt/sources.list:1 http://deb.debian.org/debian/ bookworm main Debian",
        "/etc/apt/sources.list:2 http://deb.debian.org/debian/ bookworm-updates main Debian",
        "/etc/apt/sources.list:2 http://deb.debian.org/debian/ bookworm-updates contrib Debian",
        "/etc/apt/sources.list.d/debian.sources:2 http://deb.debian.org/debian-security/"
        " bookworm-security main Debian",
        "/etc/apt/sources.list.d/pgdg.list:1 http://apt.postgresql.org/pub/repos/apt/"
        " bookworm-pgdg main apt.postgresql.org",
        "/etc/apt/sources.list.d/new.list:1 http://mirror.invalid/debian/ bookworm main"
        " $(ORIGIN)",
        "/etc/apt/sources.list.d/google.list:1 https://dl.google.com/linux/chrome/deb/ stable main"
        " Google LLC",
    ]
    assert apt_entries_lacking(lines, "contrib", "Debian", "main") == [
        "/etc/apt/sources.list.d/debian.sources:2", "/etc/apt/sources.list:1"]
    assert apt_entries_lacking(lines[1:3], "contrib", "Debian", "main") == []
