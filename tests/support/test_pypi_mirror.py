"""tests/support/pypi_mirror.py: every wheel link offers PEP 658 metadata, nothing else changes.

The resolution test of tests/ansible/test_site.py relies on it to resolve
tensorflow[and-cuda] without the CUDA wheels; here the page rewrite is checked on the
shapes PyPI's simple pages take (a link with or without either metadata attribute, with
or without a fragment and other attributes, sdists), generated with Hypothesis.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from hypothesis import given
from hypothesis import strategies as st

from tests.support.pypi_mirror import with_metadata_for_every_wheel

FILES = "https://files.pythonhosted.org/packages/ab/cd/"
METADATA_ATTRIBUTES = ("data-core-metadata", "data-dist-info-metadata")


class Links(HTMLParser):
    """Each <a>'s attributes, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _links(page: str) -> list[dict[str, str | None]]:
    parser = Links()
    parser.feed(page)
    return parser.links


names = st.from_regex(r"[a-z][a-z0-9_]{0,10}-[0-9]{1,2}\.[0-9]{1,2}", fullmatch=True)
link = st.builds(
    lambda name, wheel, fragment, python, metadata: (
        f'<a href="{FILES}{name}{"-py3-none-any.whl" if wheel else ".tar.gz"}'
        f'{"#sha256=" + "0" * 64 if fragment else ""}"'
        f'{" data-requires-python=" + chr(34) + "&gt;=3.9" + chr(34) if python else ""}'
        f'{f" {metadata}=" + chr(34) + "sha256=" + "1" * 64 + chr(34) if metadata else ""}'
        f'>{name}</a><br/>'),
    names, st.booleans(), st.booleans(), st.booleans(),
    st.sampled_from([None, *METADATA_ATTRIBUTES]))


@given(st.lists(link, max_size=6))
def test_each_wheel_gets_metadata_and_the_rest_stays_as_it_was(anchors: list[str]) -> None:
    page = "<!DOCTYPE html><html><body>\n" + "\n".join(anchors) + "\n</body></html>\n"
    before, after = _links(page), _links(with_metadata_for_every_wheel(page))
    assert len(after) == len(before)
    for old, new in zip(before, after, strict=True):
        # PyPI's attributes are kept as they were: href (hash included), requires-python.
        assert {key: new[key] for key in old} == old
        wheel = re.search(r"\.whl(#|$)", old["href"] or "") is not None
        had = any(key in old for key in METADATA_ATTRIBUTES)
        if wheel and not had:
            assert {key: new.get(key) for key in METADATA_ATTRIBUTES} == dict.fromkeys(
                METADATA_ATTRIBUTES, "true")
        else:  # an sdist, or a wheel whose metadata PyPI already names with its hash
            assert new == old
