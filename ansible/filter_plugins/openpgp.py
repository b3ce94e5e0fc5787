"""Ansible filter: fingerprints of the primary keys in an OpenPGP public key block.

Why a filter and not `gpg --show-keys` on the target: the fingerprint check
must run before anything is installed (a fresh host may have no gpg), must
work in --check mode, and must not depend on the target's gpg version. The
fingerprint is a hash over the key packet (RFC 4880 section 12.2 for v4 keys,
RFC 9580 section 5.5.4 for v6), so a few lines of Python compute it exactly.

    {{ key_text | openpgp_fingerprints }}  ->  ["EB693B3035CD5710E231E123A4B469963BF863CC"]
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from typing import Any

from ansible.errors import AnsibleFilterError

PUBLIC_KEY_TAG = 6
ARMOR_BEGIN = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
ARMOR_END = "-----END PGP PUBLIC KEY BLOCK-----"


def _dearmor(text: str) -> bytes:
    """Base64 body of an ASCII-armored block (headers and CRC line dropped)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    try:
        start = lines.index(ARMOR_BEGIN)
        end = lines.index(ARMOR_END, start)
    except ValueError as exc:
        raise AnsibleFilterError(
            "not an ASCII-armored OpenPGP public key block (no BEGIN/END PGP PUBLIC KEY "
            "BLOCK lines): is the key URL right?"
        ) from exc
    body = lines[start + 1 : end]
    if "" in body:  # armor headers (Version:, Comment:) end at the first blank line
        body = body[body.index("") + 1 :]
    payload = "".join(line for line in body if not line.startswith("="))
    try:
        return base64.b64decode(payload, validate=True)
    except binascii.Error as exc:
        raise AnsibleFilterError(f"corrupt OpenPGP armor: {exc}") from exc


def _packets(data: bytes) -> list[tuple[int, bytes]]:
    """Split a binary OpenPGP stream into (tag, body) pairs (old and new packet formats)."""
    packets: list[tuple[int, bytes]] = []
    pos = 0
    while pos < len(data):
        header = data[pos]
        if not header & 0x80:
            raise AnsibleFilterError(f"corrupt OpenPGP data: bad packet header at byte {pos}")
        if header & 0x40:  # new format
            tag = header & 0x3F
            first = data[pos + 1]
            if first < 192:
                length, pos = first, pos + 2
            elif first < 224:
                length, pos = ((first - 192) << 8) + data[pos + 2] + 192, pos + 3
            elif first == 255:
                length, pos = int.from_bytes(data[pos + 2 : pos + 6], "big"), pos + 6
            else:
                raise AnsibleFilterError("partial-length packets cannot occur in a key block")
        else:  # old format
            tag = (header >> 2) & 0x0F
            size = {0: 1, 1: 2, 2: 4}.get(header & 0x03)
            if size is None:
                length, pos = len(data) - pos - 1, pos + 1
            else:
                length = int.from_bytes(data[pos + 1 : pos + 1 + size], "big")
                pos += 1 + size
        packets.append((tag, data[pos : pos + length]))
        pos += length
    return packets


def _fingerprint(body: bytes) -> str:
    version = body[0] if body else 0
    if version == 4:
        digest = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest()
    elif version in (5, 6):
        prefix = b"\x9a" if version == 5 else b"\x9b"
        digest = hashlib.sha256(prefix + len(body).to_bytes(4, "big") + body).hexdigest()
    else:
        raise AnsibleFilterError(f"unsupported OpenPGP key version {version}")
    return digest.upper()


def openpgp_fingerprints(key: Any) -> list[str]:
    """Upper-case hex fingerprints of every primary public key in `key` (armored text)."""
    if not isinstance(key, str) or not key.strip():
        raise AnsibleFilterError("openpgp_fingerprints expects the key's armored text")
    fingerprints = [
        _fingerprint(body) for tag, body in _packets(_dearmor(key)) if tag == PUBLIC_KEY_TAG
    ]
    if not fingerprints:
        raise AnsibleFilterError("the OpenPGP block holds no public key")
    return fingerprints


class FilterModule:
    """Registers the filter with Ansible."""

    def filters(self) -> dict[str, Any]:
        return {"openpgp_fingerprints": openpgp_fingerprints}
