"""JSON and YAML from outside are read in bounded size, depth and nodes, and fail in one line.

The readers (workloads/bounded.py) stand between every record, log, fleet record,
scaling summary and sweep spec a command reads and Python's parsers, which trust
their input's shape: ``json.loads`` of ten thousand ``[`` raises ``RecursionError``
and a 5000-digit number ``ValueError`` (neither a ``JSONDecodeError``: tracebacks
before), PyYAML's composer recurses per level, and a few aliases stand for billions
of nodes. Families of such texts are generated; each is parsed or refused as
``BadInput`` with a one-line message, nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workloads import bounded, records
from workloads.errors import WorkloadError

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + n)}: &{chr(98 + n)} [{', '.join(['*' + chr(97 + n)] * 9)}]\n" for n in range(8))


@st.composite
def hostile_json(draw: st.DrawFn) -> str:
    depth = draw(st.integers(0, 20_000))
    opener = draw(st.sampled_from(["[", '{"k":']))
    closer = "]" if opener == "[" else "}"
    inner = draw(st.sampled_from(["1", "1" * draw(st.integers(1, 6000)), '"s"', "1e999",
                                  "-" + "9" * 120, "", "null"]))
    closed = draw(st.booleans())
    return opener * depth + inner + (closer * depth if closed else "")


@settings(max_examples=150, deadline=None)
@given(text=st.one_of(hostile_json(), st.text(max_size=200)))
def test_any_json_text_parses_or_is_refused_in_one_line(text: str) -> None:
    try:
        value = bounded.loads_json(text)
    except bounded.BadInput as refusal:
        assert "\n" not in str(refusal) and len(str(refusal)) < 120
    else:
        assert value == json.loads(text)


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(0, 3000), flow=st.booleans())
def test_any_yaml_nesting_parses_or_is_refused_in_one_line(depth: int, flow: bool) -> None:
    if not flow:
        depth //= 10  # block style costs an indent per level: 300 levels are 90 kB
    text = ("[" * depth + "1" + "]" * depth) if flow else "".join(
        f"{'  ' * n}k{n}:\n" for n in range(depth)) + "  " * depth + "v\n"
    try:
        bounded.loads_yaml(text)
    except bounded.BadInput as refusal:
        assert depth > bounded.YAML_DEPTH_MAX - 2 or "over the" in str(refusal), refusal
        assert "\n" not in str(refusal)


def test_a_billion_laughs_is_refused_before_it_is_built() -> None:
    with pytest.raises(bounded.BadInput, match="more than 100000 YAML nodes"):
        bounded.loads_yaml(LAUGHS)
    assert bounded.loads_yaml("a: &a [1, 2]\nb: *a\n") == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize(("content", "message"), [
    ("[" * 100_000, "nests deeper than 64 levels"),
    ('{"workload": ' + "1" * 5000 + "}", "holds a number of 5000 characters"),
    ('{"workload": "x"', "is not valid JSON"),
    (b"\xff\xfe{", "is not valid JSON"),
])
def test_a_record_that_would_have_raised_is_one_line(
    tmp_path: Path, content: str | bytes, message: str
) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(WorkloadError, match=message) as refused:
        records.read_record(path)
    assert "\n" not in refused.value.one_line()


def test_a_file_over_its_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    with path.open("wb") as handle:
        handle.truncate(bounded.RECORD_MAX_BYTES + 1)  # sparse: nothing to read, only its size
    with pytest.raises(bounded.BadInput, match=f"over the {bounded.RECORD_MAX_BYTES}"):
        bounded.read_json(path)


def test_a_log_skips_lines_it_cannot_bound(tmp_path: Path) -> None:
    log = tmp_path / records.LOG_NAME
    log.write_text('{"workload": "a"}\n' + "[" * 10_000 + "\n" + '{"workload": "b"}\n'
                   + '{"n": ' + "9" * 5000 + "}\n" + '{"workload": "c"')
    assert [r["workload"] for r in records.read_log(log)] == ["a", "b"]
