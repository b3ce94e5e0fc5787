"""The key filter accounts for every byte of the vendors' real keys, whatever a mirror adds.

The streams are built from NVIDIA's and Docker's published keys
(tests/fixtures/vendor_keys) by packet surgery, the way a mirror would edit them:
a subpacket (a notation, a preference, junk) inserted into a signature's unhashed
area, which no signature covers; bytes appended inside any packet; headers
re-encoded in another valid form; and random bytes inserted, deleted or changed
anywhere. The filter must then refuse the file in one line, or install exactly
the keyring it rebuilds from the vendor's clean file: the same bytes, the same size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_plugin
from tests.fixtures.vendor_keys import VENDOR_KEYS

openpgp = load_plugin("openpgp.py")
KEYS = sorted(VENDOR_KEYS, key=lambda path: path.name)
SIGNATURE, USER_ID = 2, 13
ISSUERS_AND_BACK_SIGNATURE = {16, 32, 33}


def filtered(key: str | bytes, fingerprint: str) -> dict[str, Any]:
    result: dict[str, Any] = openpgp.FilterModule().filters()["openpgp_pinned_keyring"](
        key, fingerprint)
    return result


def clean(path: Path) -> tuple[bytes, str]:
    """The vendor's key as binary packets, and its pinned fingerprint."""
    return openpgp._dearmor(path.read_text()), VENDOR_KEYS[path][1]


def installed(result: dict[str, Any]) -> bytes:
    assert result["ok"], result["problem"]
    return bytes(openpgp._dearmor(result["keyring"]))


def assert_refused(result: dict[str, Any]) -> str:
    assert not result["ok"], "accepted bytes the filter did not account for"
    problem: str = result["problem"]
    assert problem and "\n" not in problem and len(problem) < 200, problem
    assert result["keyring"] == ""
    return problem


def header(tag: int, length: int, style: str) -> bytes:
    """A packet header in one of the valid forms (RFC 4880 section 4.2)."""
    if style == "old" and tag < 16:
        for length_type, size in ((0, 1), (1, 2), (2, 4)):
            if length < 1 << (8 * size):
                return bytes([0x80 | tag << 2 | length_type]) + length.to_bytes(size, "big")
    if style == "old-long" and tag < 16:
        return bytes([0x80 | tag << 2 | 2]) + length.to_bytes(4, "big")
    if style == "new-long":
        return bytes([0xC0 | tag, 0xFF]) + length.to_bytes(4, "big")
    if length < 192:
        return bytes([0xC0 | tag, length])
    if length < 8384:
        return bytes([0xC0 | tag, ((length - 192) >> 8) + 192, (length - 192) & 0xFF])
    return bytes([0xC0 | tag, 0xFF]) + length.to_bytes(4, "big")


STYLES = st.sampled_from(["old", "old-long", "new", "new-long"])


def subpacket(kind: int, content: bytes) -> bytes:
    size = len(content) + 1
    if size < 192:
        length = bytes([size])
    elif size < 8384:
        length = bytes([((size - 192) >> 8) + 192, (size - 192) & 0xFF])
    else:
        length = b"\xff" + size.to_bytes(4, "big")
    return length + bytes([kind]) + content


def with_unhashed(body: bytes, insert: bytes, at: int) -> bytes:
    """A signature body with ``insert`` placed before its ``at``-th unhashed subpacket."""
    hashed_length = int.from_bytes(body[4:6], "big")
    start = 6 + hashed_length
    length = int.from_bytes(body[start:start + 2], "big")
    area = body[start + 2:start + 2 + length]
    offsets, position = [], 0
    while position < len(area):
        offsets.append(position)
        first = area[position]
        if first < 192:
            size, skip = first, 1
        elif first < 255:
            size, skip = ((first - 192) << 8) + area[position + 1] + 192, 2
        else:
            size, skip = int.from_bytes(area[position + 1:position + 5], "big"), 5
        position += skip + size
    offsets.append(len(area))
    cut = offsets[at % len(offsets)]
    area = area[:cut] + insert + area[cut:]
    return body[:start] + len(area).to_bytes(2, "big") + area + body[start + 2 + length:]


NOTATION_KINDS = st.integers(0, 127).filter(lambda kind: kind not in ISSUERS_AND_BACK_SIGNATURE)


@st.composite
def unhashed_additions(draw: st.DrawFn) -> tuple[Path, bytes]:
    """A vendor key with subpackets added to the unhashed areas, headers re-encoded."""
    path = draw(st.sampled_from(KEYS))
    binary, _ = clean(path)
    packets = openpgp._packets(binary)
    signatures = [index for index, each in enumerate(packets) if each.tag == SIGNATURE]
    chosen = draw(st.lists(st.sampled_from(signatures), min_size=1, max_size=3))
    out = []
    for index, each in enumerate(packets):
        body = each.body
        for _ in range(chosen.count(index)):
            kind = draw(NOTATION_KINDS) | (0x80 if draw(st.booleans()) else 0)
            content = draw(st.binary(max_size=300))
            body = with_unhashed(body, subpacket(kind, content), draw(st.integers(0, 8)))
        out.append(header(each.tag, len(body), draw(STYLES)) + body)
    return path, b"".join(out)


@settings(max_examples=150, deadline=None)
@given(case=unhashed_additions())
def test_unhashed_additions_install_as_the_clean_key(case: tuple[Path, bytes]) -> None:
    path, stream = case
    binary, fingerprint = clean(path)
    expected = installed(filtered(path.read_text(), fingerprint))
    assert expected == binary  # the vendor's file is what the filter would write itself
    result = filtered(stream, fingerprint)
    assert installed(result) == expected
    if stream != binary:
        assert any("unhashed" in note for note in result["notes"]) or len(stream) == len(binary)


@st.composite
def appended_inside(draw: st.DrawFn) -> tuple[Path, bytes, int]:
    """A vendor key with bytes added at the end of one packet's body (its length fixed)."""
    path = draw(st.sampled_from(KEYS))
    binary, _ = clean(path)
    packets = openpgp._packets(binary)
    target = draw(st.integers(0, len(packets) - 1))
    junk = draw(st.binary(min_size=1, max_size=4096))
    out = []
    for index, each in enumerate(packets):
        body = each.body + junk if index == target else each.body
        out.append(header(each.tag, len(body), draw(STYLES)) + body)
    return path, b"".join(out), packets[target].tag


@settings(max_examples=150, deadline=None)
@given(case=appended_inside())
def test_bytes_after_any_packets_content_are_refused(case: tuple[Path, bytes, int]) -> None:
    path, stream, _tag = case
    assert_refused(filtered(stream, clean(path)[1]))


MUTATION = st.tuples(st.sampled_from(["insert", "append", "set", "flip", "delete"]),
                     st.integers(0, 10**6), st.integers(0, 255))


def mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    buffer = bytearray(data)
    for operation, where, value in mutations:
        position = where % (len(buffer) + 1)
        if operation == "append":
            buffer.append(value)
        elif operation == "insert":
            buffer.insert(position, value)
        elif position < len(buffer):
            if operation == "delete":
                del buffer[position]
            elif operation == "flip":
                buffer[position] ^= 1 << (value % 8)
            else:
                buffer[position] = value
    return bytes(buffer)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(KEYS), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_any_mutated_vendor_key_is_refused_or_installs_as_the_clean_key(
        path: Path, mutations: list[tuple[str, int, int]]) -> None:
    binary, fingerprint = clean(path)
    result = filtered(mutate(binary, mutations), fingerprint)
    if result["ok"]:
        assert installed(result) == binary
    else:
        assert_refused(result)


# --- The cases that were shown, and the size bound --------------------------------------

def _first_signature_index(packets: list[Any], path: Path) -> int:
    return next(i for i, each in enumerate(packets) if each.tag == SIGNATURE)


@pytest.mark.parametrize("path", KEYS, ids=lambda path: path.name)
def test_a_200_byte_unhashed_notation_is_left_out(path: Path) -> None:
    binary, fingerprint = clean(path)
    packets = openpgp._packets(binary)
    index = _first_signature_index(packets, path)
    notation = subpacket(20, b"\x80\x00\x00\x00" + (8).to_bytes(2, "big")
                         + (186).to_bytes(2, "big") + b"mirror@x" + b"n" * 186)
    body = with_unhashed(packets[index].body, notation, 0)
    stream = b"".join(header(each.tag, len(b), "old") + b for each, b in (
        (each, body if i == index else each.body) for i, each in enumerate(packets)))
    result = filtered(stream, fingerprint)
    assert len(installed(result)) == len(binary)
    assert installed(result) == binary
    assert any("left out 1 unhashed subpacket(s) (type 20)" in note for note in result["notes"])


@pytest.mark.parametrize("path", KEYS, ids=lambda path: path.name)
def test_4_kib_of_junk_after_a_binding_signature_is_refused(path: Path) -> None:
    binary, fingerprint = clean(path)
    packets = openpgp._packets(binary)
    index = len(packets) - 1 if packets[-1].tag == SIGNATURE else _first_signature_index(
        packets, path)
    body = packets[index].body + bytes(range(256)) * 16
    stream = b"".join(header(each.tag, len(b), "old") + b for each, b in (
        (each, body if i == index else each.body) for i, each in enumerate(packets)))
    assert "bytes after its value" in assert_refused(filtered(stream, fingerprint))


def test_a_signing_subkey_without_its_back_signature_is_refused() -> None:
    """Docker's signing subkey: its binding's embedded 0x19 dropped from the unhashed area."""
    path = next(p for p in KEYS if p.name.startswith("docker"))
    binary, fingerprint = clean(path)
    packets = openpgp._packets(binary)
    body = packets[-1].body
    signature = openpgp._signature(body)
    kept = [(kind, content) for kind, content in signature.unhashed if kind & 0x7F != 32]
    stripped = openpgp._encode_signature(signature, kept)
    stream = b"".join(each.raw for each in packets[:-1])
    stream += header(2, len(stripped), "old") + stripped
    assert "without its back signature" in assert_refused(filtered(stream, fingerprint))


def test_an_input_over_the_cap_is_refused_before_it_is_read() -> None:
    path = KEYS[0]
    text = path.read_text() + "\n" * openpgp.INPUT_MAX_BYTES
    problem = assert_refused(filtered(text, VENDOR_KEYS[path][1]))
    assert "more than the 1048576" in problem  # refused from its length, before any parse
