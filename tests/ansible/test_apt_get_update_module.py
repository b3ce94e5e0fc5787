"""apt_get_update (repo_trust's library) and the rule that every apt refresh goes through it.

The module runs `apt-get update` unless apt's indexes are younger than `max_age`, the apt
module's `cache_valid_time` test; the stop-or-retry decision is the `apt_update_problem`
filter's (tests/ansible/test_apt_update_filter.py). The play-level checks: a refused
repository on the host stops the play at once (tests/ansible/test_trust.py,
test_site.py), a failed download is retried (test_trust.py).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_library_module
from tests.ansible.playbook import ANSIBLE_DIR

update = load_library_module("apt_get_update.py", "repo_trust")


@given(age=st.one_of(st.none(), st.floats(min_value=-1e7, max_value=1e7)),
       max_age=st.integers(min_value=-10, max_value=10**6))
def test_indexes_are_fresh_only_when_younger_than_max_age(age: float | None,
                                                          max_age: int) -> None:
    """0 (or less) reads always; no stamp, or one from the future (a clock set back), reads."""
    assert update.is_fresh(age, max_age) is (
        max_age > 0 and age is not None and 0 <= age < max_age)


def test_the_first_stamp_that_exists_gives_the_age(tmp_path: Path) -> None:
    stamp, lists = tmp_path / "update-success-stamp", tmp_path / "lists"
    lists.mkdir()
    os.utime(lists, (1000, 1000))
    assert update.indexes_age(1600.0, (str(stamp), str(lists))) == 600.0
    stamp.touch()
    os.utime(stamp, (1500, 1500))
    assert update.indexes_age(1600.0, (str(stamp), str(lists))) == 100.0
    assert update.indexes_age(1600.0, (str(tmp_path / "none"),)) is None


def test_no_role_reads_apt_indexes_with_the_apt_modules_update_cache() -> None:
    """The apt module retries a refused repository five times and then cannot say which kind
    of failure it was; every refresh is repo_trust's apt_update (or apt_index) instead."""
    offenders = [f"{path.relative_to(ANSIBLE_DIR)}:{number}"
                 for path in sorted((ANSIBLE_DIR / "roles").rglob("*.yml"))
                 for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.match(r"\s*(update_cache|cache_valid_time)\s*:", line)]
    assert offenders == []


USERINFO = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Z", "Cc"),
                                 exclude_characters="/"), min_size=1, max_size=30)


# apt 2.6's lines for a repository it refuses, as Debian 12's apt-get printed them in this suite's
# other-vendor play (tests/ansible/test_trust.py), the repository's URI as {uri}; and a "Hit" line.
APT_LINES = [
    "Err:1 {uri}  InRelease\n  The following signatures couldn't be verified because the public"
    " key is not available: NO_PUBKEY 9B0412C2769679D7",
    "W: GPG error: {uri}  InRelease: The following signatures couldn't be verified because the"
    " public key is not available: NO_PUBKEY 9B0412C2769679D7",
    "E: The repository '{uri}  InRelease' is not signed.",
    "Hit:2 {uri}  InRelease",
]


@given(user=USERINFO, password=USERINFO,
       scheme=st.sampled_from(["http", "https", "tor+https", "mirror+http"]),
       line=st.sampled_from(APT_LINES))
def test_a_password_in_a_sources_uri_never_leaves_the_module(
        user: str, password: str, scheme: str, line: str) -> None:
    """A credential written into the entry (auth.conf is the documented place) is what apt's
    lines would quote; the module returns them with *** in its place."""
    uri = f"{scheme}://{user}:{password}@repo.example.com/private"
    redacted = update.redact(f"Reading package lists...\n{line.format(uri=uri)}\n")
    assert f"{user}:{password}" not in redacted
    assert f"{scheme}://***@repo.example.com/private" in redacted


def test_text_without_credentials_is_unchanged() -> None:
    text = ("Get:1 http://deb.debian.org/debian bookworm InRelease [151 kB]\n"
            "E: Failed to fetch https://[::1]:8443/x/ ./ Release  404  Not Found\n"
            "W: mail me at ops@example.com\n")
    assert update.redact(text) == text
