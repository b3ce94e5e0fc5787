"""The installed keyring is GnuPG's clean export of the vendor's key, whatever a mirror adds.

The streams are built from NVIDIA's and Docker's published keys
(tests/fixtures/vendor_keys) and from a key gpg makes here with a signing subkey
(its binding carries an embedded back signature), the way a mirror would edit them
without the vendor's secret key: signatures repeated, their unhashed areas padded
with notations and other subpackets (which no signature covers) or their lengths
re-encoded, packet headers re-encoded in every valid form, user IDs and another
key's subkey added, the whole key repeated. Whatever the edit, the keyring the
filter returns must be byte for byte what plain gpg exports from the vendor's clean
file (`clean_export`), and its every line at most 200 characters. Random byte edits
must be refused in one line or install nothing that the clean key does not hold.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_plugin
from tests.ansible.openpgp_keys import (
    HEADER_STYLES,
    PUBLIC_KEY,
    PUBLIC_SUBKEY,
    SIGNATURE,
    USER_ID,
    Gpg,
    armor,
    clean_export,
    dearmor,
    header,
    join,
    long_lengths,
    notation,
    nothing_added,
    pad_embedded,
    split,
    subpacket,
    unhashed_subpackets,
    with_unhashed,
)
from tests.ansible.test_openpgp_filter import NoGpg
from tests.fixtures.vendor_keys import VENDOR_KEYS

openpgp = load_plugin("openpgp.py")
LINE_MAX = 200
COVERED = {16, 32, 33}  # the unhashed subpackets a clean signature has: never added here
MADE_NAME = "gpg-ed25519-signing-subkey"  # the key gpg makes here, and its packets
MADE_TAGS = (PUBLIC_KEY, USER_ID, SIGNATURE, PUBLIC_SUBKEY, SIGNATURE, PUBLIC_SUBKEY, SIGNATURE)


def filtered(key: str | bytes, fingerprint: str) -> dict[str, Any]:
    result: dict[str, Any] = openpgp.FilterModule().filters()["openpgp_pinned_keyring"](
        key, fingerprint)
    for text in [result["problem"], result.get("summary", ""), result.get("controller_problem", ""),
                 *result["notes"]]:
        assert_line(text)
    return result


def assert_line(text: str) -> None:
    """One line, printable, at most 200 characters."""
    assert len(text) <= LINE_MAX and text.isprintable(), repr(text[:300])


def installed(result: dict[str, Any]) -> bytes:
    assert result["ok"], result["problem"] or result["controller_problem"]
    return dearmor(result["keyring"])


def assert_refused(result: dict[str, Any]) -> str:
    assert not result["ok"], "accepted bytes that are not the pinned key"
    assert result["problem"] and result["keyring"] == ""
    return str(result["problem"])


@dataclass(frozen=True)
class Key:
    """A key as its vendor publishes it, and what gpg exports of it clean."""

    name: str
    fingerprint: str
    binary: bytes
    clean: bytes


@cache
def vendor_keys() -> tuple[Key, ...]:
    keys = []
    for path in sorted(VENDOR_KEYS, key=lambda each: each.name):
        binary, fingerprint = dearmor(path.read_text()), VENDOR_KEYS[path][1]
        keys.append(Key(path.name, fingerprint, binary, clean_export(binary, fingerprint)))
    return tuple(keys)


@dataclass(frozen=True)
class Made:
    """Keys gpg makes here: one with a signing subkey, and the mirror's own."""

    signing: Key
    mirror: bytes  # the mirror's key: primary, user ID, certification, subkey, binding
    mirror_fingerprint: str


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Made]:
    gpg = Gpg(tmp_path_factory.mktemp("accounting") / "gnupg")
    try:
        pinned = gpg.generate("vendor <vendor@example.invalid>", "ed25519")
        gpg.run("--quick-add-key", pinned, "ed25519", "sign", "never")
        gpg.run("--quick-add-key", pinned, "cv25519", "encr", "never")
        binary = gpg.export(pinned)
        mirror = gpg.generate("mirror <mirror@example.invalid>", "ed25519")
        gpg.run("--quick-add-key", mirror, "cv25519", "encr", "never")
        assert tuple(tag for tag, _ in split(binary)) == MADE_TAGS
        yield Made(Key(MADE_NAME, pinned, binary,
                       clean_export(binary, pinned)), gpg.export(mirror), mirror)
    finally:
        gpg.close()


def test_the_clean_keys_are_gpgs_clean_exports(made: Made) -> None:
    """The vendors' files and gpg's own export are already clean: the filter changes nothing."""
    for key in (*vendor_keys(), made.signing):
        assert key.clean == key.binary, key.name
        result = filtered(armor(key.binary), key.fingerprint)
        assert installed(result) == key.clean
        assert result["notes"] == []
        assert result["found"] == [key.fingerprint]


# --- The families ---------------------------------------------------------------------------

PADDING_KINDS = st.integers(0, 127).filter(lambda kind: kind not in COVERED)
KEY_NAMES = (*sorted(path.name for path in VENDOR_KEYS), MADE_NAME)


@cache
def key_tags(name: str) -> tuple[int, ...]:
    """The packet tags of a key, in its file's order: what a mirror's edits are drawn over."""
    if name == MADE_NAME:
        return MADE_TAGS
    key = next(key for key in vendor_keys() if key.name == name)
    return tuple(tag for tag, _ in split(key.binary))


@st.composite
def padding(draw: st.DrawFn) -> bytes:
    """An unhashed subpacket a mirror can add: a notation, or any other type with junk."""
    if draw(st.booleans()):
        return notation(draw(st.binary(min_size=1, max_size=40)),
                        draw(st.binary(max_size=400)))
    kind = draw(PADDING_KINDS) | (0x80 if draw(st.booleans()) else 0)
    return subpacket(kind, draw(st.binary(max_size=300)), long_length=draw(st.booleans()))


@dataclass(frozen=True)
class Copy:
    """A copy of a signature as a mirror serves it: subpackets added to its unhashed area
    (each before the `at`-th one, modulo), lengths re-encoded, its back signature padded."""

    added: tuple[tuple[bytes, int], ...] = ()
    long_lengths: bool = False
    embedded: bytes | None = None

    def of(self, body: bytes) -> bytes:
        for subpackets, at in self.added:
            body = with_unhashed(body, subpackets, at)
        if self.long_lengths:
            body = long_lengths(body)
        return body if self.embedded is None else pad_embedded(body, self.embedded)


@dataclass(frozen=True)
class Edit:
    """What a mirror does at one packet of the key: copies of it placed among the copies so
    far (`at`), each copy's header form, a user ID added after a user ID's self-signature."""

    copies: tuple[tuple[int, Copy], ...] = ()
    styles: tuple[str, ...] = ("old",)
    user_id: bytes | None = None
    user_id_signed: bool = False


@dataclass(frozen=True)
class Served:
    """The vendor's key as a mirror serves it: every edit keeps the vendor's packets in it."""

    key: str
    edits: tuple[Edit, ...]
    foreign_subkey: bool = False  # the mirror's subkey, bound by the mirror's key
    repeated: bool = False  # the vendor's key again, as gpg would read a second copy
    armored: bool = False

    def stream(self, key: Key, made: Made) -> bytes:
        packets = split(key.binary)
        assert tuple(tag for tag, _ in packets) == key_tags(self.key)
        out: list[bytes] = []
        for (tag, body), edit in zip(packets, self.edits, strict=True):
            bodies = [body]
            for at, copy in edit.copies:
                bodies.insert(at, copy.of(body))
            out += [header(tag, len(each), style) + each
                    for each, style in zip(bodies, edit.styles, strict=True)]
            if edit.user_id is not None:  # a user ID the vendor never certified
                out.append(header(USER_ID, len(edit.user_id), "old") + edit.user_id)
                if edit.user_id_signed:  # with the vendor's self-signature of another
                    out.append(header(SIGNATURE, len(body), "old") + body)
        if self.foreign_subkey:
            foreign = split(made.mirror)
            subkey = next(index for index, (tag, _) in enumerate(foreign)
                          if tag == PUBLIC_SUBKEY)
            out.append(join(foreign[subkey:subkey + 2]))
        stream = b"".join(out) + (key.binary if self.repeated else b"")
        return armor(stream).encode() if self.armored else stream


@st.composite
def copies(draw: st.DrawFn) -> Copy:
    """A repeated signature: padded, re-encoded, its back signature padded, or as it was."""
    added = tuple((draw(padding()), draw(st.integers(0, 4)))
                  for _ in range(draw(st.integers(0, 2))))
    return Copy(added, draw(st.booleans()), draw(padding()) if draw(st.booleans()) else None)


@st.composite
def served(draw: st.DrawFn) -> Served:
    name = draw(st.sampled_from(KEY_NAMES))
    tags = key_tags(name)
    edits = []
    for index, tag in enumerate(tags):
        placed: list[tuple[int, Copy]] = []
        if tag == SIGNATURE:
            for count in range(1, draw(st.integers(0, 3)) + 1):
                placed.append((draw(st.integers(0, count)), draw(copies())))
        styles = tuple(draw(st.sampled_from(HEADER_STYLES)) for _ in range(len(placed) + 1))
        user_id, signed = None, False
        if tag == SIGNATURE and tags[index - 1] == USER_ID and draw(st.booleans()):
            user_id, signed = draw(st.binary(min_size=1, max_size=60)), draw(st.booleans())
        edits.append(Edit(tuple(placed), styles, user_id, signed))
    return Served(name, tuple(edits), draw(st.booleans()), draw(st.booleans()),
                  draw(st.booleans()))


# Found by this family: GnuPG's duplicate removal judged copies of a signature equal on their
# signature values alone and kept the last one read. A subkey's binding followed by a copy with
# a subpacket of unknown type marked critical in its unhashed area (which GnuPG then refuses)
# left the subkey with no valid binding, and gpg left the vendor's subkey out.
PADDED = Copy(((notation(b"\x00", b""), 0), (subpacket(0, b""), 0)))
CRITICAL = Copy(((subpacket(0x80, b""), 0),))
FOUND = Served(MADE_NAME, (
    Edit(), Edit(),
    Edit(((0, PADDED), (1, Copy())), ("old",) * 3),  # the user ID's self-signature
    Edit(), Edit(), Edit(),
    Edit(((0, PADDED), (2, CRITICAL)), ("old",) * 3),  # the encryption subkey's binding
))
DOCKER_SIGNING = Served("docker-ce-debian.asc", (  # the same, shrunk, on Docker's own key
    Edit(), Edit(), Edit(), Edit(),
    Edit(((1, CRITICAL),), ("old",) * 2),  # its signing subkey's binding
))


@example(case=FOUND)
@example(case=DOCKER_SIGNING)
@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=served())
def test_what_a_mirror_adds_installs_as_the_clean_key(made: Made, case: Served) -> None:
    key = next(key for key in (*vendor_keys(), made.signing) if key.name == case.key)
    result = filtered(case.stream(key, made), key.fingerprint)
    assert installed(result) == key.clean
    assert result["found"] == [key.fingerprint]


def padded_copies(key: Key, count: int, seed: int) -> bytes:
    """The key with `count` copies of its first self-signature, each carrying its own
    notation in the unhashed area, placed before and after the original (fixed seed)."""
    chooser = random.Random(seed)
    packets = split(key.binary)
    first = next(index for index, (tag, _) in enumerate(packets) if tag == SIGNATURE)
    body = packets[first][1]
    copies = [header(SIGNATURE, len(padded), chooser.choice(HEADER_STYLES)) + padded
              for padded in (with_unhashed(body, notation(b"mirror@example.invalid",
                                                          b"%06d" % number), chooser.randint(0, 3))
                             for number in range(count))]
    cut = chooser.randint(0, count)
    return (join(packets[:first]) + b"".join(copies[:cut]) + join(packets[first:first + 1])
            + b"".join(copies[cut:]) + join(packets[first + 1:]))


def test_1500_notation_variants_of_one_self_signature_install_one(made: Made) -> None:
    """The shown case: before, 1,500 variants of NVIDIA's self-signature gave an 857,760-byte
    keyring. Each key here, with 1,500 variants, installs exactly its clean export."""
    for seed, key in enumerate((*vendor_keys(), made.signing)):
        stream = padded_copies(key, 1500, seed)
        assert len(stream) > 100 * len(key.clean)
        result = filtered(stream, key.fingerprint)
        assert installed(result) == key.clean, key.name
        assert len(installed(result)) == len(key.clean)
        assert result["notes"] and "left out" in result["notes"][0]


def test_only_variants_without_the_clean_signature_install_the_clean_key(made: Made) -> None:
    """The mirror serves padded copies only: gpg keeps one of them, the filter strips it."""
    for key in (*vendor_keys(), made.signing):
        packets = split(key.binary)
        stream = join([(tag, with_unhashed(body, notation(b"m@example.invalid", b"x" * 300), 0)
                        if tag == SIGNATURE else body) for tag, body in packets], "new-long")
        assert installed(filtered(stream, key.fingerprint)) == key.clean, key.name


@pytest.mark.parametrize("style", HEADER_STYLES)
def test_every_header_form_installs_the_clean_key(made: Made, style: str) -> None:
    for key in (*vendor_keys(), made.signing):
        stream = join([(tag, long_lengths(body) if tag == SIGNATURE else body)
                       for tag, body in split(key.binary)], style)
        assert stream != key.binary
        assert installed(filtered(stream, key.fingerprint)) == key.clean, key.name


def test_a_padded_back_signature_installs_the_clean_key(made: Made) -> None:
    """The signing subkey's embedded back signature padded: it is stripped the same way."""
    key = made.signing
    packets = split(key.binary)
    padded = [(tag, pad_embedded(body, notation(b"m@example.invalid", b"y" * 200))
               if tag == SIGNATURE else body) for tag, body in packets]
    assert padded != packets
    assert installed(filtered(join(padded), key.fingerprint)) == key.clean


def test_a_critical_copy_after_each_signature_installs_the_clean_key(made: Made) -> None:
    """Every signature followed by a copy that GnuPG refuses (an unknown subpacket type marked
    critical in its unhashed area): each copy is checked on its own and left out, so no user
    ID or subkey loses its valid signature to it."""
    for key in (*vendor_keys(), made.signing):
        stream = join([packet for tag, body in split(key.binary) for packet in (
            [(tag, body), (tag, CRITICAL.of(body))] if tag == SIGNATURE else [(tag, body)])])
        assert installed(filtered(stream, key.fingerprint)) == key.clean, key.name


def test_a_revocation_served_twice_installs_once(tmp_path: Path) -> None:
    """A revoked key (gpg's own revocation certificate imported) whose revocation the mirror
    serves padded and as it was: GnuPG keeps both copies (they verify, and its duplicate
    removal is off), the filter's reduction makes them one packet, installed once."""
    gpg = Gpg(tmp_path / "gnupg")
    try:
        pinned = gpg.generate("vendor <vendor@example.invalid>", "ed25519")
        certificate = (gpg.home / "openpgp-revocs.d" / f"{pinned}.rev").read_text()
        gpg.run("--import", data=certificate.replace(":-----BEGIN", "-----BEGIN").encode())
        binary = gpg.export(pinned)
    finally:
        gpg.close()
    packets = split(binary)
    assert [tag for tag, _ in packets[:2]] == [PUBLIC_KEY, SIGNATURE]
    assert packets[1][1][1] == 0x20  # a key revocation, right after the primary key
    padded = with_unhashed(packets[1][1], notation(b"m@example.invalid", b"z" * 50), 0)
    result = filtered(join([packets[0], (SIGNATURE, padded), *packets[1:]]), pinned)
    assert installed(result) == clean_export(binary, pinned) == binary


def test_a_back_signature_keeps_no_signature_of_its_own(made: Made) -> None:
    """A copy of the signing subkey's binding whose first unhashed subpacket is a chain of
    embedded signatures, each claiming to be a subkey binding (GnuPG reads unhashed areas up
    to 10,000 bytes: some 800 levels). It verifies and follows the vendor's, so GnuPG keeps
    it; the edited back signature is installed as edited (a known limit: the subkey becomes
    unusable), but reduced to its issuer fields, with nothing of the chain inside it."""
    key = made.signing
    packets = split(key.binary)
    binding = packets[4][1]
    assert binding[1] == 0x18 and any(kind == 32 for kind, _ in unhashed_subpackets(binding))
    chain = b""
    for _ in range(600):
        chain = subpacket(32, b"\x04\x18\x16\x08\x00\x00" + len(chain).to_bytes(2, "big") + chain)
    stream = join([*packets[:5], (SIGNATURE, with_unhashed(binding, chain, 0)), *packets[5:]])
    result = filtered(stream, key.fingerprint)
    bindings = [body for tag, body in split(installed(result)) if tag == SIGNATURE
                and body[1] == 0x18]
    embedded = [content for body in bindings for kind, content in unhashed_subpackets(body)
                if kind & 0x7F == 32]
    assert len(bindings) == 2 and len(embedded) == 1  # the encryption subkey has none
    assert all(kind & 0x7F != 32 for each in embedded for kind, _ in unhashed_subpackets(each))
    assert len(installed(result)) < len(key.clean) + 100


def test_another_key_appended_is_refused_naming_it(made: Made) -> None:
    for key in (*vendor_keys(), made.signing):
        for stream in (key.binary + made.mirror,
                       (armor(key.binary) + armor(made.mirror)).encode()):
            result = filtered(stream, key.fingerprint)
            assert assert_refused(result).startswith(
                f"holds the pinned key {key.fingerprint} and also {made.mirror_fingerprint};")
            assert not result["wrong_key"]


def test_a_wrong_fingerprint_is_refused() -> None:
    nvidia, docker = vendor_keys()
    result = filtered(nvidia.binary, docker.fingerprint)
    assert assert_refused(result) == f"has fingerprint {nvidia.fingerprint}"
    assert result["wrong_key"] and result["found"] == [nvidia.fingerprint]


# --- Random edits ---------------------------------------------------------------------------

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


@settings(max_examples=80, deadline=None)
@given(index=st.integers(0, 1), mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_any_mutated_vendor_key_is_refused_or_installs_only_clean_packets(
        index: int, mutations: list[tuple[str, int, int]]) -> None:
    """gpg leaves out what no longer verifies, and an edit may delete an unhashed subpacket;
    nothing that is not in the vendor's file is installed."""
    key = vendor_keys()[index]
    result = filtered(mutate(key.binary, mutations), key.fingerprint)
    if not result["ok"]:
        assert_refused(result)
        return
    packets, clean = split(installed(result)), split(key.clean)
    assert packets[0] == clean[0]
    assert all(nothing_added(packet, clean) for packet in packets)


def test_an_input_over_the_cap_is_refused_before_gpg_reads_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key = vendor_keys()[0]
    monkeypatch.setattr(openpgp, "subprocess", NoGpg())  # no gpg: the cap must come first
    problem = assert_refused(filtered(key.binary + b"\n" * openpgp.INPUT_MAX_BYTES,
                                      key.fingerprint))
    assert "more than the 1048576" in problem
