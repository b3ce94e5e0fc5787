"""dnf_removals: what a dnf transaction would remove, read from the table dnf prints.

The nvidia_driver role reads `dnf module switch-to ... --assumeno` before a branch
switch and stops on any removal it did not name. The tables below are generated in
dnf 4's layout (libdnf's transaction table: a one-space indent per row, section titles
flush left with a colon, long names alone on their line with the row continued
below, `replacing` lines under an obsoleting package); the role's run against real
dnf is in tests/ansible/test_platforms.py (the Rocky brownfield host's refused switch).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters

dnf_removals = load_filters("dnf_transaction.py")["dnf_removals"]

# Section titles dnf 4 prints in a transaction table; the first three remove packages.
REMOVING = ["Removing:", "Removing dependent packages:", "Removing unused dependencies:"]
KEEPING = ["Installing:", "Upgrading:", "Downgrading:", "Reinstalling:",
           "Installing dependencies:", "Installing weak dependencies:",
           "Skipping packages with conflicts:"]
NAMES = st.from_regex(r"[a-z][a-z0-9+_.-]{0,40}[a-z0-9]", fullmatch=True)


def _row(name: str, wide: bool) -> list[str]:
    """One package row; a long name stands alone and the rest follows, indented."""
    rest = "x86_64   3:580.126.16-1.el9      cuda-rhel9-x86_64      10 k"
    if wide:
        return [f" {name}", f"{' ' * 25}{rest}"]
    return [f" {name:<24} {rest}"]


@st.composite
def transactions(draw: st.DrawFn) -> tuple[str, set[str]]:
    """A table as dnf prints it, and the names it removes."""
    lines = ["Dependencies resolved.", "=" * 80,
             " Package          Arch     Version              Repository        Size", "=" * 80]
    removed: set[str] = set()
    for title in draw(st.lists(st.sampled_from(REMOVING + KEEPING), min_size=1, max_size=5)):
        lines.append(title)
        for name in draw(st.lists(NAMES, min_size=1, max_size=4)):
            lines += _row(name, draw(st.booleans()))
            if title in REMOVING:
                removed.add(name)
            elif title.startswith("Installing") and draw(st.booleans()):
                old = draw(NAMES)
                lines.append(f"     replacing  {old}.x86_64 1.0-1")
                removed.add(old)
    lines += ["Switching module streams:",
              " nvidia-driver                 590-open -> 580-open", "",
              "Transaction Summary", "=" * 80, "Remove  1 Package", "", "Operation aborted."]
    return "\n".join(lines) + "\n", removed


@given(transactions())
def test_every_removal_and_nothing_else_is_read(transaction: tuple[str, set[str]]) -> None:
    table, removed = transaction
    assert dnf_removals(table) == sorted(removed)


def test_a_switch_that_removes_a_sites_package() -> None:
    table = """\
Dependencies resolved.
================================================================================
 Package                  Arch    Version               Repository         Size
================================================================================
Downgrading:
 libnvidia-ml             x86_64  3:580.126.16-1.el9    cuda-rhel9-x86_64  10 k
 nvidia-driver-cuda       x86_64  3:580.126.16-1.el9    cuda-rhel9-x86_64  10 k
Removing dependent packages:
 site-gpu-agent           noarch  1.0-1                 @commandline        0
Switching module streams:
 nvidia-driver                    590-open -> 580-open

Transaction Summary
================================================================================
Remove     1 Package
Downgrade  2 Packages

Operation aborted.
"""
    assert dnf_removals(table) == ["site-gpu-agent"]


def test_nothing_to_do() -> None:
    assert dnf_removals("Dependencies resolved.\nNothing to do.\nComplete!\n") == []
    assert dnf_removals("") == []
