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

Every byte is accounted for: each key and signature packet must parse to its
exact length (key material, signature values: nothing after them), packet types
a public key does not have are refused, and the keyring is re-encoded from the
checked fields (canonical headers, minimal MPIs). Of a signature's unhashed area,
which its signature does not cover, only the issuer fields (key ID, fingerprint,
both checked to name the pinned key) and a subkey binding's embedded back
signature (itself verified with the subkey) are kept; anything else there (a
notation, a preference, junk) is left out and named in the notes. So a vendor
key with unhashed additions installs byte for byte as the clean key does. The
input is at most :data:`INPUT_MAX_BYTES`; parsing is linear in its size, and the
signatures verified are the pinned key's own, at most one per packet.

Why this parser and not a library: Sequoia (``pysequoia`` on PyPI, a Rust wheel)
and GnuPG (``--export-options export-minimal``) both normalise a certificate, but
neither refuses what it drops (a notation, trailing bytes, a second copy), both
keep unhashed subpackets they know, and either would be one more program on
every controller (pysequoia's wheels need glibc 2.34; gpg needs a home directory
per run). The guarantees above are byte-level and tested here with Hypothesis
over the vendors' own keys; a library would still need this check around it.

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

INPUT_MAX_BYTES = 1 << 20  # a vendor's key file is a few kB; keyserver copies with many
# third-party signatures reach a few hundred kB
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


def _crc24_table() -> list[int]:
    table = []
    for index in range(256):
        crc = index << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
        table.append(crc & 0xFFFFFF)
    return table


_CRC24_TABLE = _crc24_table()


def _crc24(data: bytes) -> int:
    """The armor checksum (RFC 4880 section 6.1), a table lookup per byte."""
    crc = 0xB704CE
    for byte in data:
        crc = ((crc << 8) & 0xFFFFFF) ^ _CRC24_TABLE[((crc >> 16) ^ byte) & 0xFF]
    return crc


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


# Public-key algorithms (RFC 4880 section 9.1, RFC 9580 section 9.1): how their key
# material and their signature values are laid out, so that both parse to their end.
RSA_ALGORITHMS = (1, 2, 3)
ELGAMAL, DSA, ECDH, ECDSA, EDDSA_LEGACY = 16, 17, 18, 19, 22
X25519, X448, ED25519, ED448 = 25, 26, 27, 28
KEY_MPIS = {1: 2, 2: 2, 3: 2, ELGAMAL: 3, DSA: 4}
CURVE_KEYS = (ECDH, ECDSA, EDDSA_LEGACY)
FIXED_KEYS = {X25519: 32, X448: 56, ED25519: 32, ED448: 57}
SIGNATURE_MPIS = {1: 1, 3: 1, DSA: 2, ECDSA: 2, EDDSA_LEGACY: 2}
FIXED_SIGNATURES = {ED25519: 64, ED448: 114}


def _check_key_material(body: bytes) -> None:
    """A v4 key packet must be its material and nothing more (RFC 4880 section 5.5.2)."""
    _fingerprint(body)
    algorithm, material = body[5], body[6:]
    if algorithm in KEY_MPIS:
        _, rest = _mpis(material, KEY_MPIS[algorithm])
    elif algorithm in CURVE_KEYS:
        oid_length = _byte(material, 0)
        _slice(material, 1, oid_length)
        _, rest = _mpis(material[1 + oid_length:], 1)
        if algorithm == ECDH:  # KDF parameters: length 3, reserved 1, hash, cipher
            if rest[:2] != b"\x03\x01" or len(rest) < 4:
                raise Refused("holds an ECDH key with KDF parameters this check cannot read")
            rest = rest[4:]
    elif algorithm in FIXED_KEYS:
        _slice(material, 0, FIXED_KEYS[algorithm])
        rest = material[FIXED_KEYS[algorithm]:]
    else:
        raise Refused(f"holds a key of public-key algorithm {algorithm}, which this check "
                      "cannot account for")
    if rest:
        raise Refused(f"holds a key packet with {len(rest)} bytes after its key material")


@dataclass(frozen=True)
class Signature:
    """A v4 signature packet, parsed to its last byte."""

    kind: int
    algorithm: int
    hash_algorithm: int
    hashed_part: bytes  # version .. hashed subpackets: what the trailer covers
    hashed: tuple[tuple[int, bytes], ...]  # (type with critical bit, content)
    unhashed: tuple[tuple[int, bytes], ...]
    left16: bytes
    values: tuple[bytes, ...]  # the signature's MPIs, minimal (or its one fixed field)
    fixed: bool  # Ed25519/Ed448: one field of fixed size, not MPIs

    @property
    def issuer_fingerprints(self) -> tuple[str, ...]:
        return tuple(content[1:].hex().upper() for kind, content in self.hashed + self.unhashed
                     if kind & 0x7F == ISSUER_FINGERPRINT and content)

    @property
    def issuer_key_ids(self) -> tuple[str, ...]:
        return tuple(content.hex().upper() for kind, content in self.hashed + self.unhashed
                     if kind & 0x7F == ISSUER_KEY_ID)


ISSUER_KEY_ID, EMBEDDED_SIGNATURE, ISSUER_FINGERPRINT = 16, 32, 33
PRIMARY_KEY_BINDING = 0x19


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
        found.append((content[0], content[1:]))
    return found


def _signature(body: bytes, *, strict: bool = True) -> Signature:
    """Parse a v4 signature to its end; ``strict``: its value must be the algorithm's, exactly.

    A signature that is dropped anyway (another key's certification) is parsed
    with ``strict`` off when its algorithm is one this check does not know.
    """
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
    value = body[position + 2:]
    algorithm = body[2]
    if algorithm in SIGNATURE_MPIS:
        values, rest = _mpis(value, SIGNATURE_MPIS[algorithm])
        values = [item.lstrip(b"\0") for item in values]
        fixed = False
    elif algorithm in FIXED_SIGNATURES:
        size = FIXED_SIGNATURES[algorithm]
        values, rest, fixed = [_slice(value, 0, size)], value[size:], True
    elif strict:
        raise Refused(f"holds a signature of public-key algorithm {algorithm}, which this "
                      "check cannot account for")
    else:
        values, rest, fixed = [value], b"", True
    if rest:
        raise Refused(f"holds a signature with {len(rest)} bytes after its value")
    return Signature(kind=body[1], algorithm=algorithm, hash_algorithm=body[3],
                     hashed_part=body[:6 + hashed_length], hashed=tuple(_subpackets(hashed)),
                     unhashed=tuple(_subpackets(unhashed)), left16=left16,
                     values=tuple(values), fixed=fixed)


def _subpacket(kind: int, content: bytes) -> bytes:
    """One subpacket, its length in the shortest form (RFC 4880 section 5.2.3.1)."""
    size = len(content) + 1
    if size < 192:
        length = bytes([size])
    elif size < 8384:
        length = bytes([((size - 192) >> 8) + 192, (size - 192) & 0xFF])
    else:
        length = b"\xff" + size.to_bytes(4, "big")
    return length + bytes([kind]) + content


def _mpi(value: bytes) -> bytes:
    """A multiprecision integer: its bit count, then its bytes with no leading zero."""
    value = value.lstrip(b"\0")
    bits = int.from_bytes(value, "big").bit_length()
    return bits.to_bytes(2, "big") + value


def _encode_signature(signature: Signature, unhashed: list[tuple[int, bytes]]) -> bytes:
    """The signature's bytes rebuilt: its hashed part as signed, ``unhashed``, its value."""
    area = b"".join(_subpacket(kind, content) for kind, content in unhashed)
    value = signature.values[0] if signature.fixed else b"".join(
        _mpi(item) for item in signature.values)
    return (signature.hashed_part + len(area).to_bytes(2, "big") + area + signature.left16
            + value)


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


def _verify(signer: bytes, signature: Signature, digest: bytes,
            hash_factory: Callable[[], hashes.HashAlgorithm]) -> None:
    """Raise InvalidSignature unless the key (packet body `signer`) made `signature`."""
    algorithm, material = signer[5], signer[6:]
    if signature.algorithm != algorithm:
        raise InvalidSignature
    prehashed = utils.Prehashed(hash_factory())
    if algorithm in (1, 3):
        (modulus, exponent), _ = _mpis(material, 2)
        (value,) = signature.values
        public = rsa.RSAPublicNumbers(int.from_bytes(exponent, "big"),
                                      int.from_bytes(modulus, "big")).public_key()
        padded = value.rjust(len(modulus.lstrip(b"\0")), b"\0")
        public.verify(padded, digest, padding.PKCS1v15(), prehashed)
    elif algorithm == EDDSA_LEGACY:
        oid, point = _curve_key(material)
        if oid != ED25519_OID or len(point) != 33 or point[0] != 0x40:
            raise Refused("holds an EdDSA key on a curve other than Ed25519")
        r, s = signature.values
        if len(r) > 32 or len(s) > 32:
            raise InvalidSignature
        key = ed25519.Ed25519PublicKey.from_public_bytes(point[1:])
        key.verify(r.rjust(32, b"\0") + s.rjust(32, b"\0"), digest)
    elif algorithm == ED25519:
        key = ed25519.Ed25519PublicKey.from_public_bytes(_slice(material, 0, 32))
        key.verify(signature.values[0], digest)
    elif algorithm == ECDSA:
        oid, point = _curve_key(material)
        if oid not in ECDSA_CURVES:
            raise Refused("holds an ECDSA key on a curve this check does not know")
        curve_key = ec.EllipticCurvePublicKey.from_encoded_point(ECDSA_CURVES[oid](), point)
        r, s = signature.values
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


def _verifies(primary: bytes, signature: Signature, component: Packet | None,
              signer: bytes | None = None) -> bool:
    """True when `signer` (default: the primary key) made `signature` over the key (and
    `component`)."""
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
        _verify(primary if signer is None else signer, signature, digest, factory)
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


def _unhashed_kept(primary: Packet, signature: Signature, component: Packet | None,
                   where: str, notes: list[str]) -> list[tuple[int, bytes]]:
    """What of the signature's unhashed area stays: the first issuer key ID, the first
    issuer fingerprint and, on a subkey binding, the first embedded back signature,
    verified with the subkey and rebuilt the same way. Everything else is left out."""
    kept: dict[int, tuple[int, bytes]] = {}
    dropped: list[int] = []
    binding = signature.kind == SUBKEY_BINDING and component is not None
    for kind, content in signature.unhashed:
        plain = kind & 0x7F
        wanted = plain in (ISSUER_KEY_ID, ISSUER_FINGERPRINT) or (
            plain == EMBEDDED_SIGNATURE and binding)
        if not wanted or plain in kept:
            dropped.append(plain)
            continue
        if plain == EMBEDDED_SIGNATURE:
            assert component is not None
            content = _back_signature(primary, component, content, where)
        kept[plain] = (plain, content)
    if dropped:
        shown = ", ".join(str(kind) for kind in sorted(set(dropped)))
        notes.append(f"left out {len(dropped)} unhashed subpacket(s) (type {shown}) of a "
                     f"signature {where} (no signature covers them)")
    return [kept[kind] for kind in (ISSUER_KEY_ID, ISSUER_FINGERPRINT, EMBEDDED_SIGNATURE)
            if kind in kept]


def _back_signature(primary: Packet, subkey: Packet, body: bytes, where: str) -> bytes:
    """An embedded primary key binding (0x19), verified with the subkey; its bytes rebuilt."""
    signature = _signature(body)
    if signature.kind != PRIMARY_KEY_BINDING:
        raise Refused(f"holds an embedded signature of type 0x{signature.kind:02X} {where}, "
                      "where only a back signature (0x19) belongs")
    subkey_id = _fingerprint(subkey.body)
    if not _issued_by(signature, subkey_id):
        raise Refused(f"holds a back signature {where} made by key {_issuer(signature)}, not "
                      "by the subkey")
    if not _verifies(primary.body, signature, subkey, signer=subkey.body):
        raise Refused(f"holds a back signature {where} that does not verify with the subkey "
                      "(the file was altered)")
    unhashed = [(kind & 0x7F, content) for kind, content in signature.unhashed
                if kind & 0x7F in (ISSUER_KEY_ID, ISSUER_FINGERPRINT)]
    first = {kind: (kind, content) for kind, content in reversed(unhashed)}
    return _encode_signature(signature, [first[kind] for kind in (ISSUER_KEY_ID,
                                                                  ISSUER_FINGERPRINT)
                                         if kind in first])


KEY_FLAGS, MAY_SIGN = 27, 0x02


def _may_sign(signature: Signature) -> bool:
    """The binding's key flags (hashed: the vendor signed them) give the subkey signing."""
    return any(kind & 0x7F == KEY_FLAGS and content and content[0] & MAY_SIGN
               for kind, content in signature.hashed)


def _keep_signatures(primary: Packet, fingerprint: str, component: Packet | None,
                     signatures: list[Packet], notes: list[str]) -> list[Packet]:
    """The signatures of the pinned key on `component` (or on the key itself), verified and
    rebuilt from their checked fields."""
    allowed = (KEY_SIGNATURES if component is None
               else SUBKEY_SIGNATURES if component.tag == PUBLIC_SUBKEY else USER_ID_SIGNATURES)
    where = "on the key itself" if component is None else f"on {_describe(component)}"
    kept: list[Packet] = []
    seen: set[bytes] = set()
    for packet in signatures:
        if packet.body in seen:
            raise Refused(f"holds the same signature twice {where}")
        seen.add(packet.body)
        signature = _signature(packet.body, strict=False)
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
        signature = _signature(packet.body)  # the pinned key's: its value parsed to the end
        if not _verifies(primary.body, signature, component):
            raise Refused(f"holds a {allowed[signature.kind]} signature {where} that does not "
                          "verify with the pinned key (the file was altered)")
        unhashed = _unhashed_kept(primary, signature, component, where, notes)
        if signature.kind == SUBKEY_BINDING and _may_sign(signature) and not any(
                kind & 0x7F == EMBEDDED_SIGNATURE for kind, _ in (*signature.hashed, *unhashed)):
            raise Refused(f"holds a signing {where[3:]} without its back signature (0x19), "
                          "which signing subkeys carry")
        body = _encode_signature(signature, unhashed)
        kept.append(Packet(SIGNATURE, body, _encode_packet(SIGNATURE, body)))
    return kept


def _rebuild(packets: list[Packet], fingerprint: str, notes: list[str]) -> list[Packet]:
    """The packets of the one key, checked: the primary, its own signatures and components."""
    primary, *rest = packets
    _check_key_material(primary.body)
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
    seen_components: set[tuple[int, bytes]] = set()
    for part in components:
        if (part.packet.tag, part.packet.body) in seen_components:
            raise Refused(f"holds {_describe(part.packet)} twice")
        seen_components.add((part.packet.tag, part.packet.body))
        if part.packet.tag == PUBLIC_SUBKEY:
            seen_subkey = True
            _check_key_material(part.packet.body)
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


def _encode_packet(tag: int, body: bytes) -> bytes:
    """A packet with the header gpg writes: the old format with the shortest length for
    tags below 16, the new format above (RFC 4880 section 4.2)."""
    if tag < 16:
        for length_type, size in ((0, 1), (1, 2), (2, 4)):
            if len(body) < 1 << (8 * size):
                header = bytes([0x80 | tag << 2 | length_type])
                return header + len(body).to_bytes(size, "big") + body
    if len(body) < 192:
        length = bytes([len(body)])
    elif len(body) < 8384:
        length = bytes([((len(body) - 192) >> 8) + 192, (len(body) - 192) & 0xFF])
    else:
        length = b"\xff" + len(body).to_bytes(4, "big")
    return bytes([0xC0 | tag]) + length + body


def _armor(data: bytes) -> str:
    """ASCII armor with the CRC-24 line (what rpm --import and apt's .asc keyrings read)."""
    encoded = base64.b64encode(data).decode("ascii")
    lines = [encoded[index:index + 64] for index in range(0, len(encoded), 64)]
    checksum = base64.b64encode(_crc24(data).to_bytes(3, "big")).decode("ascii")
    return "\n".join([ARMOR_BEGIN, "", *lines, f"={checksum}", ARMOR_END, ""])


def pinned_keyring(key: str | bytes, pinned: str) -> tuple[str, list[str], list[str]]:
    """(armored keyring, primary fingerprints found, notes); raises Refused with the reason."""
    if len(key) > INPUT_MAX_BYTES:
        raise Refused(f"is {len(key)} bytes, more than the {INPUT_MAX_BYTES} a key file is "
                      "given (a vendor's key: a few kB)")
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
        others = list(dict.fromkeys(other for other in found if other != pinned))
        if not others:
            raise Refused(f"holds the pinned key {pinned} {len(found)} times; apt and rpm "
                          "would read every copy", found=found)
        raise Refused(f"holds the pinned key {pinned} and also {', '.join(others)}; apt and "
                      "rpm would trust every key in it", found=found)
    notes: list[str] = []
    kept = _rebuild(keys[0], pinned, notes)
    keyring = b"".join(_encode_packet(packet.tag, packet.body) for packet in kept)
    return _armor(keyring), found, notes


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
