"""Keys made by the real gpg, and the edits a mirror can make to a key file, for the key filter.

Why gpg and not a Python OpenPGP library: gpg is what the filter runs and what the
vendors sign with; the venv has no OpenPGP library. Every key, signature and
certification here is made by gpg (`--quick-generate-key`, `--quick-add-key`,
`--quick-add-uid`, `--quick-sign-key`). The helpers below only re-frame what gpg
made, as a mirror can without the vendor's secret key: packet headers in each valid
form (RFC 4880 section 4.2) and subpackets added to a signature's unhashed area
(section 5.2.3), which no signature covers. `clean_export` is the oracle the tests
compare with: plain gpg, `import-minimal,import-clean` then `export-minimal`, in a
home of its own, with none of the filter's code.
"""

from __future__ import annotations

import base64
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

SIGNATURE, PUBLIC_KEY, USER_ID, PUBLIC_SUBKEY = 2, 6, 13, 14
HEADER_STYLES = ("old", "old-long", "new", "new-long")


class Gpg:
    """gpg in its own home directory; `close` stops its agent and removes nothing else."""

    def __init__(self, home: Path) -> None:
        home.mkdir(mode=0o700)
        self.home = home
        self.env = {**os.environ, "GNUPGHOME": str(home)}

    def run(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(
            ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "",
             *args], input=data, env=self.env, check=True, capture_output=True).stdout

    def generate(self, user_id: str, algorithm: str) -> str:
        self.run("--quick-generate-key", user_id, algorithm, "sign", "never")
        colons = self.run("--with-colons", "--list-keys", user_id).decode()
        return next(line.split(":")[9] for line in colons.splitlines()
                    if line.startswith("fpr:"))

    def export(self, fingerprint: str, *options: str) -> bytes:
        return self.run("--export", *options, fingerprint)

    def close(self) -> None:
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env, check=False,
                       capture_output=True)


def clean_export(data: bytes, fingerprint: str) -> bytes:
    """What gpg alone exports of `fingerprint` from `data`: minimal, clean, binary."""
    home = tempfile.mkdtemp(prefix="openpgp-oracle-")
    try:
        command = ["gpg", "--homedir", home, "--batch", "--no-autostart", "--quiet"]
        subprocess.run([*command, "--import-options", "import-minimal,import-clean",
                        "--import"], input=data, capture_output=True, check=False)
        return subprocess.run([*command, "--export-options", "export-minimal", "--export",
                               fingerprint], capture_output=True, check=True).stdout
    finally:
        subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True,
                       check=False)
        shutil.rmtree(home)


def dearmor(text: str | bytes) -> bytes:
    """gpg --dearmor: the binary packets of an armored block."""
    data = text.encode() if isinstance(text, str) else text
    return subprocess.run(["gpg", "--batch", "--dearmor"], input=data, capture_output=True,
                          check=True).stdout


def split(binary: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each packet of a well-formed key (definite lengths, both formats)."""
    found, position = [], 0
    while position < len(binary):
        first = binary[position]
        if first & 0x40:
            tag, octet = first & 0x3F, binary[position + 1]
            if octet < 192:
                length, start = octet, position + 2
            elif octet < 224:
                length, start = ((octet - 192) << 8) + binary[position + 2] + 192, position + 3
            else:
                length = int.from_bytes(binary[position + 2:position + 6], "big")
                start = position + 6
        else:
            tag, size = (first >> 2) & 0x0F, 1 << (first & 0x03)
            length = int.from_bytes(binary[position + 1:position + 1 + size], "big")
            start = position + 1 + size
        found.append((tag, binary[start:start + length]))
        position = start + length
    return found


def header(tag: int, length: int, style: str) -> bytes:
    """A packet header in one of the valid forms: the old format with the shortest or the
    four-byte length, the new format with the shortest or the five-byte length."""
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


def join(packets: list[tuple[int, bytes]], style: str = "old") -> bytes:
    return b"".join(header(tag, len(body), style) + body for tag, body in packets)


def subpacket(kind: int, content: bytes, long_length: bool = False) -> bytes:
    """One signature subpacket; `long_length`: the five-byte length form, valid but not
    the shortest."""
    size = len(content) + 1
    if long_length or size >= 8384:
        length = b"\xff" + size.to_bytes(4, "big")
    elif size < 192:
        length = bytes([size])
    else:
        length = bytes([((size - 192) >> 8) + 192, (size - 192) & 0xFF])
    return length + bytes([kind]) + content


def notation(name: bytes, value: bytes) -> bytes:
    """A human-readable notation subpacket (type 20, RFC 4880 section 5.2.3.16)."""
    return subpacket(20, b"\x80\x00\x00\x00" + len(name).to_bytes(2, "big")
                     + len(value).to_bytes(2, "big") + name + value)


def unhashed_offsets(body: bytes) -> tuple[int, int, list[int]]:
    """(start, end) of a v4 signature's unhashed area and its subpackets' offsets in it."""
    start = 6 + int.from_bytes(body[4:6], "big")
    end = start + 2 + int.from_bytes(body[start:start + 2], "big")
    area, offsets, position = body[start + 2:end], [], 0
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
    return start, end, [*offsets, len(area)]


def with_unhashed(body: bytes, insert: bytes, at: int) -> bytes:
    """A v4 signature with `insert` placed before its `at`-th unhashed subpacket (modulo)."""
    start, end, offsets = unhashed_offsets(body)
    area = body[start + 2:end]
    cut = offsets[at % len(offsets)]
    area = area[:cut] + insert + area[cut:]
    return body[:start] + len(area).to_bytes(2, "big") + area + body[end:]


def unhashed_subpackets(body: bytes) -> list[tuple[int, bytes]]:
    """(type byte, content) of each subpacket of a v4 signature's unhashed area."""
    start, end, offsets = unhashed_offsets(body)
    area, found = body[start + 2:end], []
    for offset, following in itertools.pairwise(offsets):
        first = area[offset]
        skip = 1 if first < 192 else 2 if first < 255 else 5
        found.append((area[offset + skip], area[offset + skip + 1:following]))
    return found


def with_unhashed_area(body: bytes, area: bytes) -> bytes:
    start, end, _ = unhashed_offsets(body)
    return body[:start] + len(area).to_bytes(2, "big") + area + body[end:]


def long_lengths(body: bytes) -> bytes:
    """The same signature with every unhashed subpacket length in the five-byte form."""
    return with_unhashed_area(body, b"".join(
        subpacket(kind, content, long_length=True)
        for kind, content in unhashed_subpackets(body)))


def pad_embedded(body: bytes, insert: bytes) -> bytes:
    """A subkey binding whose embedded back signature carries `insert` in its own unhashed
    area (unchanged when it has none)."""
    return with_unhashed_area(body, b"".join(
        subpacket(kind, with_unhashed(content, insert, 0) if kind & 0x7F == 32 else content)
        for kind, content in unhashed_subpackets(body)))


def crc24(data: bytes) -> int:
    """The armor checksum (RFC 4880 section 6.1), bit by bit: gpg 2.2 wants the line."""
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def armor(binary: bytes, headers: tuple[str, ...] = (), newline: str = "\n") -> str:
    """An armored public key block (RFC 4880 section 6.2)."""
    encoded = base64.b64encode(binary).decode("ascii")
    lines = [encoded[index:index + 64] for index in range(0, len(encoded), 64)]
    checksum = base64.b64encode(crc24(binary).to_bytes(3, "big")).decode("ascii")
    return newline.join(["-----BEGIN PGP PUBLIC KEY BLOCK-----", *headers, "", *lines,
                         f"={checksum}", "-----END PGP PUBLIC KEY BLOCK-----", ""])


def nothing_added(packet: tuple[int, bytes], clean: list[tuple[int, bytes]]) -> bool:
    """True when `packet` is one of the clean key's packets, or one of its signatures with
    unhashed subpackets left out (a mirror can delete them; the filter must add none).

    A subkey binding's embedded back signature may differ: gpg does not check it on import,
    only when the subkey signs (gpgv then refuses: "not cross-certified"), so an edited one
    is installed as edited and makes the vendor's signing subkey unusable, nothing more."""
    if packet in clean:
        return True
    tag, body = packet
    return tag == SIGNATURE and any(
        each_tag == SIGNATURE and _within(body, each) for each_tag, each in clean)


def _within(body: bytes, clean: bytes) -> bool:
    """`body` is the signature `clean` with some of its unhashed subpackets, in their order."""
    if len(body) < 6 or body[0] != 4 or len(clean) < 6 or clean[0] != 4:
        return body == clean
    start, end, _ = unhashed_offsets(body)
    clean_start, clean_end, _ = unhashed_offsets(clean)
    if body[:start] != clean[:clean_start] or body[end:] != clean[clean_end:]:
        return False
    remaining = unhashed_subpackets(clean)
    for kind, content in unhashed_subpackets(body):
        match = next((index for index, (clean_kind, clean_content) in enumerate(remaining)
                      if clean_kind == kind and (content == clean_content or kind & 0x7F == 32)),
                     None)
        if match is None:
            return False
        remaining = remaining[match + 1:]
    return True
