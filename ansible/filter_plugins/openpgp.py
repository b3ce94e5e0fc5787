"""Ansible filter: the pinned OpenPGP key, rebuilt from the packets that were checked.

Why rebuild instead of checking and then installing what was fetched: apt's
`signed-by` keyring and `rpm --import` read *everything* in the file they are
given. A mirror that appends a second armored block after the vendor's, or
text a reader may take for one, or a subkey that another key bound, passes any
check that reads only part of the file, and apt then accepts metadata signed by
what was appended. So this filter reads the whole input (every armored block,
every packet), accepts it only when it is exactly one transferable public key
(RFC 4880 section 11.1) whose primary fingerprint is the pinned one, with every
user ID and subkey carrying a signature of that primary key that verifies, and
returns a new armored keyring made of those packets alone. Anything it cannot
account for is refused with one line naming what was found.

Why a filter and not gpg on the target: the check runs before anything is
installed (a fresh host may have no gpg), works in --check mode, and does not
depend on the target's gpg version. Signatures are verified with the
`cryptography` package that ansible-core itself requires, on the controller.

    {{ key_text | openpgp_pinned_keyring('EB693B3035CD5710E231E123A4B469963BF863CC') }}
    {{ fetched.content_base64 | openpgp_pinned_keyring(fingerprint, encoding='base64') }}
    -> {"ok": true, "keyring": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n...", "problem": "",
        "wrong_key": false, "found": ["EB69..."], "notes": []}
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible.errors import AnsibleFilterError
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa, utils

ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"
ARMOR_HEADER = re.compile(r"^[A-Za-z][A-Za-z0-9-]*: ")
BASE64_LINE = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
CHECKSUM_LINE = re.compile(r"^=[A-Za-z0-9+/]{4}$")

SIGNATURE, PUBLIC_KEY, TRUST, USER_ID, PUBLIC_SUBKEY, USER_ATTRIBUTE = 2, 6, 12, 13, 14, 17
PACKET_NAMES = {
    1: "encrypted session key", 2: "signature", 3: "symmetric session key",
    4: "one-pass signature", 5: "secret key", 6: "public key", 7: "secret subkey",
    8: "compressed data", 9: "encrypted data", 10: "marker", 11: "literal data", 12: "trust",
    13: "user ID", 14: "public subkey", 17: "user attribute", 18: "encrypted data",
    19: "modification detection code", 20: "AEAD encrypted data", 21: "padding",
}
# Which signature types may follow which part of a key (RFC 4880 section 5.2.1).
KEY_SIGNATURES = {0x1F: "direct-key", 0x20: "key revocation"}
USER_ID_SIGNATURES = {0x10: "certification", 0x11: "certification", 0x12: "certification",
                      0x13: "certification", 0x30: "certification revocation"}
SUBKEY_SIGNATURES = {0x18: "subkey binding", 0x28: "subkey revocation"}
SUBKEY_BINDING = 0x18

HASHES: dict[int, tuple[str, Callable[[], hashes.HashAlgorithm]]] = {
    2: ("sha1", hashes.SHA1), 8: ("sha256", hashes.SHA256), 9: ("sha384", hashes.SHA384),
    10: ("sha512", hashes.SHA512), 11: ("sha224", hashes.SHA224),
    12: ("sha3_256", hashes.SHA3_256), 14: ("sha3_512", hashes.SHA3_512),
}
RSA_ALGORITHMS = (1, 3)
ECDSA, EDDSA_LEGACY, ED25519 = 19, 22, 27
ED25519_OID = bytes.fromhex("2B06010401DA470F01")
ECDSA_CURVES: dict[bytes, Callable[[], ec.EllipticCurve]] = {
    bytes.fromhex("2A8648CE3D030107"): ec.SECP256R1,
    bytes.fromhex("2B81040022"): ec.SECP384R1,
    bytes.fromhex("2B81040023"): ec.SECP521R1,
}


class Refused(Exception):
    """The input is not exactly the pinned key; the message is the one-line reason."""

    def __init__(self, reason: str, found: list[str] | None = None, wrong_key: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.found = found or []
        self.wrong_key = wrong_key


@dataclass(frozen=True)
class Packet:
    """One OpenPGP packet: its tag, its body, and its bytes as they were read."""

    tag: int
    body: bytes
    raw: bytes


@dataclass
class Component:
    """A user ID, user attribute or subkey packet with the signatures that follow it."""

    packet: Packet
    signatures: list[Packet] = field(default_factory=list)


def _quote(text: str, limit: int = 50) -> str:
    """A short, single-line, printable rendering of untrusted text for a message."""
    shown = "".join(char if char.isprintable() else "?" for char in text.strip())
    return repr(shown if len(shown) <= limit else shown[:limit] + "...")


# --- Input: ASCII armor or binary packets -------------------------------------------------


def _crc24(data: bytes) -> int:
    """The armor checksum (RFC 4880 section 6.1)."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def _dearmor(text: str) -> bytes:
    """The packets of the one armored public key block in `text`; nothing else may be there."""
    lines = text.splitlines()
    markers = [index for index, line in enumerate(lines) if line.strip().startswith("-----")]
    begins = [index for index in markers if lines[index].strip().startswith("-----BEGIN")]
    if not begins:
        raise Refused("is not an OpenPGP public key (neither an armored key block nor binary "
                      "key packets)")
    if len(begins) > 1:
        raise Refused(f"holds {len(begins)} armored blocks where the vendor's file has one "
                      "(apt and rpm would read them all)")
    begin = begins[0]
    if lines[begin].strip() != ARMOR_BEGIN:
        raise Refused(f"holds a {_quote(lines[begin])} block, not a public key block")
    after = [index for index in markers if index > begin]
    if not after or lines[after[0]].strip() != ARMOR_END:
        raise Refused("has no END line for its public key block")
    end = after[0]
    for index, line in enumerate(lines):
        if (index < begin or index > end) and line.strip():
            raise Refused(f"has text outside its armored block (line {index + 1}: "
                          f"{_quote(line)})")
    inner = [line.strip() for line in lines[begin + 1:end]]
    position = 0
    while position < len(inner) and ARMOR_HEADER.match(inner[position]):
        position += 1  # Version:, Comment: ... carry no key material
    body = [line for line in inner[position:] if line]
    checksum = body.pop() if body and CHECKSUM_LINE.match(body[-1]) else None
    for line in body:
        if not BASE64_LINE.match(line):
            raise Refused(f"has a line in its armored block that is not base64: {_quote(line)}")
    try:
        data = base64.b64decode("".join(body), validate=True)
    except binascii.Error as exc:
        raise Refused(f"has corrupt armor ({exc})") from exc
    if checksum is not None and base64.b64decode(checksum[1:]) != _crc24(data).to_bytes(3, "big"):
        raise Refused("has an armor checksum that does not match its content (altered or "
                      "truncated)")
    return data


def _input_bytes(key: str | bytes) -> bytes:
    """The binary packets of `key`: armored text, or binary data as read (e.g. a .gpg file).

    Text that came through Ansible's to_text() keeps undecodable bytes as surrogates;
    surrogateescape gives those bytes back.
    """
    try:
        raw = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)
    except UnicodeEncodeError as exc:
        raise Refused("is neither armored text nor binary OpenPGP data") from exc
    if not raw.strip():
        raise Refused("is empty")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Binary: every packet header has its top bit set (key material is never UTF-8).
        if raw[0] & 0x80:
            return raw
        raise Refused("is neither armored text nor binary OpenPGP data") from exc
    return _dearmor(text)


def _packets(data: bytes) -> list[Packet]:
    """Every packet in `data` (old and new header formats); refuses what a key never holds."""
    packets: list[Packet] = []
    position = 0
    while position < len(data):
        start = position
        header = data[position]
        if not header & 0x80:
            raise Refused(f"has bytes that are not an OpenPGP packet at offset {position}")
        if header & 0x40:  # new format
            tag = header & 0x3F
            first = _byte(data, position + 1)
            if first < 192:
                length, position = first, position + 2
            elif first < 224:
                length = ((first - 192) << 8) + _byte(data, position + 2) + 192
                position += 3
            elif first == 255:
                length = int.from_bytes(_slice(data, position + 2, 4), "big")
                position += 6
            else:
                raise Refused("uses partial-length packets, which a public key never does")
        else:  # old format
            tag = (header >> 2) & 0x0F
            length_type = header & 0x03
            if length_type == 3:
                raise Refused("has a packet of indeterminate length, which a public key never has")
            size = 1 << length_type
            length = int.from_bytes(_slice(data, position + 1, size), "big")
            position += 1 + size
        body = _slice(data, position, length)
        position += length
        packets.append(Packet(tag, body, data[start:position]))
    if not packets:
        raise Refused("holds no OpenPGP packets")
    return packets


def _byte(data: bytes, index: int) -> int:
    if index >= len(data):
        raise Refused("ends inside a packet header (truncated)")
    return data[index]


def _slice(data: bytes, start: int, length: int) -> bytes:
    if start + length > len(data):
        raise Refused(f"ends inside a packet (offset {start}; truncated)")
    return data[start:start + length]


# --- Keys and signatures ------------------------------------------------------------------


def _fingerprint(body: bytes) -> str:
    """The v4 fingerprint (RFC 4880 section 12.2); other key versions are refused."""
    version = body[0] if body else 0
    if version != 4:
        raise Refused(f"holds a version {version} key; only version 4 keys (what apt's gpgv "
                      "and rpm read) are accepted")
    if len(body) < 6:
        raise Refused("holds a truncated key packet")
    return hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()


@dataclass(frozen=True)
class Signature:
    """The parts of a v4 signature packet this filter checks."""

    kind: int
    algorithm: int
    hash_algorithm: int
    hashed_part: bytes  # version .. hashed subpackets: what the trailer covers
    left16: bytes
    value: bytes  # the algorithm-specific signature fields
    issuer_fingerprints: tuple[str, ...]
    issuer_key_ids: tuple[str, ...]


def _subpackets(area: bytes) -> list[tuple[int, bytes]]:
    found: list[tuple[int, bytes]] = []
    position = 0
    while position < len(area):
        first = area[position]
        if first < 192:
            length, position = first, position + 1
        elif first < 255:
            length = ((first - 192) << 8) + _byte(area, position + 1) + 192
            position += 2
        else:
            length = int.from_bytes(_slice(area, position + 1, 4), "big")
            position += 5
        content = _slice(area, position, length)
        position += length
        if not content:
            raise Refused("has a signature with an empty subpacket")
        found.append((content[0] & 0x7F, content[1:]))
    return found


def _signature(body: bytes) -> Signature:
    if not body or body[0] != 4:
        version = body[0] if body else 0
        raise Refused(f"holds a version {version} signature; only version 4 signatures are "
                      "accepted")
    if len(body) < 6:
        raise Refused("holds a truncated signature")
    hashed_length = int.from_bytes(body[4:6], "big")
    hashed = _slice(body, 6, hashed_length)
    position = 6 + hashed_length
    unhashed_length = int.from_bytes(_slice(body, position, 2), "big")
    unhashed = _slice(body, position + 2, unhashed_length)
    position += 2 + unhashed_length
    left16 = _slice(body, position, 2)
    fingerprints: list[str] = []
    key_ids: list[str] = []
    for kind, content in _subpackets(hashed) + _subpackets(unhashed):
        if kind == 16:
            key_ids.append(content.hex().upper())
        elif kind == 33 and content:
            fingerprints.append(content[1:].hex().upper())
    return Signature(kind=body[1], algorithm=body[2], hash_algorithm=body[3],
                     hashed_part=body[:6 + hashed_length], left16=left16,
                     value=body[position + 2:], issuer_fingerprints=tuple(fingerprints),
                     issuer_key_ids=tuple(key_ids))


def _issuer(signature: Signature) -> str:
    """Who the signature says made it: a fingerprint, else a key ID."""
    if signature.issuer_fingerprints:
        return signature.issuer_fingerprints[0]
    if signature.issuer_key_ids:
        return signature.issuer_key_ids[0]
    raise Refused("holds a signature that names no issuer")


def _issued_by(signature: Signature, fingerprint: str) -> bool:
    """True when every issuer the signature names is the key with `fingerprint`."""
    _issuer(signature)
    return (all(issuer == fingerprint for issuer in signature.issuer_fingerprints)
            and all(key_id == fingerprint[-16:] for key_id in signature.issuer_key_ids))


def _mpis(data: bytes, count: int) -> tuple[list[bytes], bytes]:
    """`count` multiprecision integers from the start of `data`, and what follows them."""
    values: list[bytes] = []
    position = 0
    for _ in range(count):
        bits = int.from_bytes(_slice(data, position, 2), "big")
        size = (bits + 7) // 8
        values.append(_slice(data, position + 2, size))
        position += 2 + size
    return values, data[position:]


def _curve_key(material: bytes) -> tuple[bytes, bytes]:
    """(curve OID, public point) of an ECDSA or EdDSA key."""
    oid_length = _byte(material, 0)
    oid = _slice(material, 1, oid_length)
    (point,), _ = _mpis(material[1 + oid_length:], 1)
    return oid, point


def _verify(primary: bytes, signature: Signature, digest: bytes,
            hash_factory: Callable[[], hashes.HashAlgorithm]) -> None:
    """Raise InvalidSignature unless the primary key (packet body) made `signature`."""
    algorithm, material = primary[5], primary[6:]
    if signature.algorithm != algorithm:
        raise InvalidSignature
    prehashed = utils.Prehashed(hash_factory())
    if algorithm in RSA_ALGORITHMS:
        (modulus, exponent), _ = _mpis(material, 2)
        (value,), _ = _mpis(signature.value, 1)
        public = rsa.RSAPublicNumbers(int.from_bytes(exponent, "big"),
                                      int.from_bytes(modulus, "big")).public_key()
        padded = value.rjust(len(modulus.lstrip(b"\0")), b"\0")
        public.verify(padded, digest, padding.PKCS1v15(), prehashed)
    elif algorithm == EDDSA_LEGACY:
        oid, point = _curve_key(material)
        if oid != ED25519_OID or len(point) != 33 or point[0] != 0x40:
            raise Refused("holds an EdDSA key on a curve other than Ed25519")
        (r, s), _ = _mpis(signature.value, 2)
        key = ed25519.Ed25519PublicKey.from_public_bytes(point[1:])
        key.verify(r.rjust(32, b"\0") + s.rjust(32, b"\0"), digest)
    elif algorithm == ED25519:
        key = ed25519.Ed25519PublicKey.from_public_bytes(_slice(material, 0, 32))
        key.verify(_slice(signature.value, 0, 64), digest)
    elif algorithm == ECDSA:
        oid, point = _curve_key(material)
        if oid not in ECDSA_CURVES:
            raise Refused("holds an ECDSA key on a curve this check does not know")
        curve_key = ec.EllipticCurvePublicKey.from_encoded_point(ECDSA_CURVES[oid](), point)
        (r, s), _ = _mpis(signature.value, 2)
        der = utils.encode_dss_signature(int.from_bytes(r, "big"), int.from_bytes(s, "big"))
        curve_key.verify(der, digest, ec.ECDSA(prehashed))
    else:
        raise Refused(f"holds a key of public-key algorithm {algorithm}, which this check "
                      "cannot verify")


def _framed(component: Packet) -> bytes:
    """A user ID, user attribute or subkey as a v4 signature hashes it."""
    if component.tag == PUBLIC_SUBKEY:
        return b"\x99" + len(component.body).to_bytes(2, "big") + component.body
    prefix = b"\xb4" if component.tag == USER_ID else b"\xd1"
    return prefix + len(component.body).to_bytes(4, "big") + component.body


def _verifies(primary: bytes, signature: Signature, component: Packet | None) -> bool:
    """True when the primary key's signature over itself (and `component`) is valid."""
    if signature.hash_algorithm not in HASHES:
        raise Refused(f"holds a signature with hash algorithm {signature.hash_algorithm}, "
                      "which is too weak or unknown")
    name, factory = HASHES[signature.hash_algorithm]
    hashed = hashlib.new(name)
    hashed.update(b"\x99" + len(primary).to_bytes(2, "big") + primary)
    if component is not None:
        hashed.update(_framed(component))
    hashed.update(signature.hashed_part)
    hashed.update(b"\x04\xff" + len(signature.hashed_part).to_bytes(4, "big"))
    digest = hashed.digest()
    if digest[:2] != signature.left16:
        return False
    try:
        _verify(primary, signature, digest, factory)
    except (InvalidSignature, ValueError):
        return False
    return True


# --- The one transferable public key ------------------------------------------------------


def _describe(component: Packet) -> str:
    if component.tag == USER_ID:
        return f"user ID {_quote(component.body.decode('utf-8', 'replace'))}"
    if component.tag == USER_ATTRIBUTE:
        return "a user attribute (photo ID)"
    try:
        return f"subkey {_fingerprint(component.body)}"
    except Refused:
        return "a subkey"


def _keep_signatures(primary: Packet, fingerprint: str, component: Packet | None,
                     signatures: list[Packet], notes: list[str]) -> list[Packet]:
    """The signatures of the pinned key on `component` (or on the key itself), verified."""
    allowed = (KEY_SIGNATURES if component is None
               else SUBKEY_SIGNATURES if component.tag == PUBLIC_SUBKEY else USER_ID_SIGNATURES)
    where = "on the key itself" if component is None else f"on {_describe(component)}"
    kept: list[Packet] = []
    for packet in signatures:
        signature = _signature(packet.body)
        if signature.kind not in allowed:
            raise Refused(f"holds a signature of type 0x{signature.kind:02X} {where}, which "
                          "a public key does not carry there")
        if not _issued_by(signature, fingerprint):
            if component is not None and component.tag == PUBLIC_SUBKEY:
                raise Refused(f"holds {_describe(component)} bound by key {_issuer(signature)}, "
                              "not by the pinned key")
            notes.append(f"left out a {allowed[signature.kind]} by key {_issuer(signature)} "
                         f"{where} (it vouches for nothing apt or rpm uses)")
            continue
        if not _verifies(primary.body, signature, component):
            raise Refused(f"holds a {allowed[signature.kind]} signature {where} that does not "
                          "verify with the pinned key (the file was altered)")
        kept.append(packet)
    return kept


def _rebuild(packets: list[Packet], fingerprint: str, notes: list[str]) -> list[Packet]:
    """The packets of the one key, checked: the primary, its own signatures and components."""
    primary, *rest = packets
    position = 0
    direct: list[Packet] = []
    while position < len(rest) and rest[position].tag == SIGNATURE:
        direct.append(rest[position])
        position += 1
    components: list[Component] = []
    for packet in rest[position:]:
        if packet.tag == SIGNATURE:
            components[-1].signatures.append(packet)
        else:
            components.append(Component(packet))
    kept = [primary, *_keep_signatures(primary, fingerprint, None, direct, notes)]
    if not any(part.packet.tag == USER_ID for part in components):
        raise Refused("holds a key without a user ID")
    seen_subkey = False
    for part in components:
        if part.packet.tag == PUBLIC_SUBKEY:
            seen_subkey = True
        elif seen_subkey:
            raise Refused(f"holds {_describe(part.packet)} after the subkeys, where a key "
                          "has none")
        signatures = _keep_signatures(primary, fingerprint, part.packet, part.signatures, notes)
        required = (SUBKEY_BINDING,) if part.packet.tag == PUBLIC_SUBKEY else (
            0x10, 0x11, 0x12, 0x13)
        if not any(_signature(packet.body).kind in required for packet in signatures):
            what = "bound" if part.packet.tag == PUBLIC_SUBKEY else "certified"
            raise Refused(f"holds {_describe(part.packet)} that the pinned key has not {what}")
        kept += [part.packet, *signatures]
    return kept


def _armor(data: bytes) -> str:
    """ASCII armor with the CRC-24 line (what rpm --import and apt's .asc keyrings read)."""
    encoded = base64.b64encode(data).decode("ascii")
    lines = [encoded[index:index + 64] for index in range(0, len(encoded), 64)]
    checksum = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode("ascii")
    return "\n".join([ARMOR_BEGIN, "", *lines, f"={checksum}", ARMOR_END, ""])


def pinned_keyring(key: str | bytes, pinned: str) -> tuple[str, list[str], list[str]]:
    """(armored keyring, primary fingerprints found, notes); raises Refused with the reason."""
    packets = _packets(_input_bytes(key))
    if packets[0].tag != PUBLIC_KEY:
        raise Refused(f"starts with a {PACKET_NAMES.get(packets[0].tag, 'unknown')} packet "
                      f"(type {packets[0].tag}), not a public key")
    for packet in packets:
        if packet.tag not in (SIGNATURE, PUBLIC_KEY, TRUST, USER_ID, PUBLIC_SUBKEY,
                              USER_ATTRIBUTE):
            raise Refused(f"holds a {PACKET_NAMES.get(packet.tag, 'unknown')} packet (type "
                          f"{packet.tag}), which a public key does not have")
    # gpg's keyring files carry local trust packets; they say nothing to apt or rpm.
    packets = [packet for packet in packets if packet.tag != TRUST]
    keys: list[list[Packet]] = []
    for packet in packets:
        if packet.tag == PUBLIC_KEY:
            keys.append([])
        keys[-1].append(packet)
    found = [_fingerprint(key_packets[0].body) for key_packets in keys]
    if pinned not in found:
        raise Refused(f"has fingerprint {', '.join(found)}", found=found, wrong_key=True)
    if len(found) > 1:
        others = ", ".join(other for other in found if other != pinned)
        raise Refused(f"holds the pinned key {pinned} and also {others}; apt and rpm would "
                      "trust every key in it", found=found)
    notes: list[str] = []
    kept = _rebuild(keys[0], pinned, notes)
    return _armor(b"".join(packet.raw for packet in kept)), found, notes


def openpgp_pinned_keyring(key: Any, fingerprint: Any, encoding: str = "text") -> dict[str, Any]:
    """The filter: a result dict; `problem` is the one-line reason when `ok` is false.

    encoding="base64": `key` is the file's bytes base64-encoded (repo_trust_fetch's
    content_base64), so that a binary file reaches the filter byte for byte.
    """
    pinned = str(fingerprint).replace(" ", "").upper()
    if not re.fullmatch(r"[0-9A-F]{40}", pinned):
        raise AnsibleFilterError(
            f"openpgp_pinned_keyring: the pinned fingerprint {fingerprint!r} is not 40 hex "
            "digits (a version 4 key's full fingerprint)")
    if not isinstance(key, str | bytes):
        raise AnsibleFilterError("openpgp_pinned_keyring expects the key file's content")
    if encoding == "base64":
        try:
            key = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise AnsibleFilterError(
                f"openpgp_pinned_keyring: the content is not base64 ({exc})") from exc
    elif encoding != "text":
        raise AnsibleFilterError(f"openpgp_pinned_keyring: unknown encoding {encoding!r}")
    try:
        keyring, found, notes = pinned_keyring(key, pinned)
    except Refused as refusal:
        return {"ok": False, "keyring": "", "problem": refusal.reason,
                "wrong_key": refusal.wrong_key, "found": refusal.found, "notes": []}
    return {"ok": True, "keyring": keyring, "problem": "", "wrong_key": False, "found": found,
            "notes": notes}


class FilterModule:
    """Registers the filter with Ansible."""

    def filters(self) -> dict[str, Any]:
        return {"openpgp_pinned_keyring": openpgp_pinned_keyring}
