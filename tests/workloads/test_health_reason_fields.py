"""Every field of a drain reason is there and readable, whatever the finding said.

The grammar (scripts/slurm/README.md) is ``workloads-health: FAULT; WHERE; ACTION; since TIME``:
sites split it on "; " and alert on the fields. A family of fields drawn by Hypothesis -- one
word longer than the whole reason (a path, a hex dump), text with ``;``, ``=``, quotes, newlines
and non-ASCII (a GPU name, a kernel-log line), empty text -- must still give a reason within
MAX_REASON with all four fields non-empty, only scontrol-safe characters, and a fault that
begins as the finding's did.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.accept.health.slurm import MAX_REASON, PREFIX, Cause, reason

SAFE = re.compile(r"[A-Za-z0-9 .,:()/#+_;-]*")
word = st.one_of(
    st.text(min_size=1, max_size=12),
    st.text(alphabet="abcdefghij0123456789/", min_size=100, max_size=400),  # one huge word
    st.sampled_from(["XID", "79", ";", "=", '"', "'", "\n", "GB200 \u00e9\u00df", "Link -1"]),
)
field = st.lists(word, max_size=30).map(" ".join)


@settings(max_examples=400, deadline=None)
@given(fault=field, where=field, action=field, more=st.integers(0, 10_000),
       since=st.floats(0, 4e9))
def test_every_field_is_there_within_the_limit(
    fault: str, where: str, action: str, more: int, since: float,
) -> None:
    said = reason(Cause(fault, where, action, since), more)
    assert len(said) <= MAX_REASON, said
    assert said.startswith(PREFIX + " ") and SAFE.fullmatch(said), said
    fields = said[len(PREFIX) + 1:].split("; ")
    assert len(fields) == (5 if more else 4), said
    assert all(f.strip() for f in fields), said
    assert fields[3].startswith("since ")
