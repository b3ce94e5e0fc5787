"""Reading the batch files out of ``cifar-10-python.tar.gz`` with bounded memory.

The archive is untrusted (a mirror sets its own checksum, ``--data-dir`` is any
file), and a tar.gz can ask for far more memory than its size: gzip compresses a
run of zeros a thousandfold, a tar header declares any size, and Python's
``tarfile`` acts on what its headers say while it parses them: a pax header's
whole declared size is read into memory, a chain of them is followed
recursively, a GNU sparse map (pax ``GNU.sparse.*``, version 1.0's map in the
member's data, the old ``S`` type's extension blocks) is read into a list of
any length, and a pax number is passed to ``int`` (past 4300 digits: ValueError).

So ``tarfile`` never sees a header that this module has not checked first: the
decompressed stream reaches it only through :class:`_CheckedStream`, which parses
every 512-byte header as it passes (:class:`_HeaderScan`) and refuses, before the
bytes are handed on, anything but files, a folder and small pax or GNU long-name
headers; more than :data:`HEADERS_MAX` headers; a size over its cap; a pax record
outside :data:`PAX_KEYWORDS` (every ``GNU.sparse`` record, and ``size``, which
would change where the next header starts); a pax number longer than
:data:`PAX_NUMBER_CHARS_MAX`; more than :data:`UNPACKED_MAX_BYTES` in all. The
file itself is opened as :func:`workloads.bounded.open_stream` opens untrusted
files (no link followed, regular files only, at most its cap).

Each cap is a generous multiple of the real archive, so only a crafted file meets it.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from workloads.bounded import open_stream
from workloads.errors import brief

# The real archive holds 9 entries (the folder, five training batches, the test batch,
# batches.meta, readme.html). Each header costs tarfile an object, and a chain of
# extended headers costs it a recursion level, so the count is capped.
HEADERS_MAX = 64
# A real batch member is 31.0 MB (10000 rows of 3072 bytes, 10000 labels and file names).
MEMBER_MAX_BYTES = 64 << 20
# A pax or GNU long-name header holds a path and a few attributes: a few hundred bytes.
EXTENDED_HEADER_MAX_BYTES = 64 << 10
# The real tar unpacks to 186 MB; this leaves room for a repacked archive's extras.
UNPACKED_MAX_BYTES = 512 << 20
# The archive file itself: the real one is 170 MB.
ARCHIVE_FILE_MAX_BYTES = 256 << 20
# pax records that change nothing about the stream's layout (POSIX.1-2001's names, and the
# timestamps GNU tar and bsdtar add); a number among them is at most this long (a time
# with nanoseconds is 20 characters).
PAX_KEYWORDS = frozenset({"path", "linkpath", "uname", "gname", "uid", "gid", "mtime", "atime",
                          "ctime", "comment", "charset", "hdrcharset"})
PAX_NUMBERS = frozenset({"uid", "gid", "mtime", "atime", "ctime"})
PAX_NUMBER_CHARS_MAX = 32
BLOCK = 512

_MEMBER_TYPES = {tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE}
_PAX_TYPES = {tarfile.XHDTYPE, tarfile.XGLTYPE}
_EXTENDED_TYPES = {*_PAX_TYPES, tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK}


class BadArchive(ValueError):
    """The archive is not one CIFAR-10 tar.gz, or it asks for more than its caps allow."""


def _number(field: bytes, what: str) -> int:
    """A tar header's number as tarfile's ``nti`` reads it: octal text, or GNU base-256.

    A base-256 field is at most 12 bytes, so its value stays small to compute; it is
    how GNU tar writes a negative size or one over 8 GiB, both refused by the caller.
    """
    if field[:1] in (b"\x80", b"\xff"):
        value = int.from_bytes(field[1:], "big")
        return value - (256 ** (len(field) - 1)) if field[:1] == b"\xff" else value
    text = field.split(b"\0", 1)[0].strip()
    if not text:
        return 0
    if len(text) > 12 or any(digit not in b"01234567" for digit in text):
        raise BadArchive(f"has a tar header whose {what} is not an octal number")
    return int(text, 8)


class _HeaderScan:
    """Every tar header of a stream, checked as its bytes go by (see the module)."""

    def __init__(self) -> None:
        self.headers = 0
        self.ended = False  # after the end-of-archive block tarfile reads no further header
        self._pending = bytearray()  # the header being gathered
        self._skip = 0  # data bytes (padded to blocks) before the next header
        self._pax: bytearray | None = None  # a pax header's records, gathered
        self._pax_left = 0

    def feed(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        pos = 0
        while pos < len(view) and not self.ended:
            if self._skip:
                count = min(self._skip, len(view) - pos)
                if self._pax is not None:
                    take = min(count, self._pax_left)
                    self._pax += view[pos:pos + take]
                    self._pax_left -= take
                    if not self._pax_left:
                        _check_pax(bytes(self._pax))
                        self._pax = None
                self._skip -= count
                pos += count
                continue
            count = min(BLOCK - len(self._pending), len(view) - pos)
            self._pending += view[pos:pos + count]
            pos += count
            if len(self._pending) == BLOCK:
                self._header(bytes(self._pending))
                self._pending.clear()

    def _header(self, block: bytes) -> None:
        if block.count(0) == BLOCK:
            self.ended = True
            return
        self.headers += 1
        if self.headers > HEADERS_MAX:
            raise BadArchive(f"holds more than {HEADERS_MAX} tar headers (the real one: 9)")
        stored = _number(block[148:156], "checksum")
        unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:])
        signed = unsigned - 2 * sum(b for b in block[:148] + block[156:] if b > 127)
        if stored not in (unsigned, signed):
            raise BadArchive("has a damaged tar header (bad checksum)")
        kind = block[156:157]
        name = block[:100].split(b"\0", 1)[0].decode("latin-1")
        if kind in _EXTENDED_TYPES:
            limit = EXTENDED_HEADER_MAX_BYTES
        elif kind in _MEMBER_TYPES:
            limit = MEMBER_MAX_BYTES
        else:
            raise BadArchive(
                f"holds {brief(name, 40)} of tar type {brief(kind)}; CIFAR-10 has only files "
                "and a folder"
            )
        size = _number(block[124:136], "size")
        if not 0 <= size <= limit:
            raise BadArchive(
                f"declares {brief(name, 40)} as {size} bytes, outside the 0 to {limit}"
            )
        if kind == tarfile.DIRTYPE:
            size = 0  # tarfile reads no data for a folder, whatever its size says
        self._skip = -(-size // BLOCK) * BLOCK
        if kind in _PAX_TYPES:
            if size == 0:
                return
            self._pax, self._pax_left = bytearray(), size


def _check_pax(records: bytes) -> None:
    """Each ``"<length> <keyword>=<value>\\n"`` record: a known keyword, a short number."""
    pos = 0
    while pos < len(records):
        space = records.find(b" ", pos, pos + 8)
        digits = records[pos:space] if space > pos else b""
        if not digits.isdigit():
            if not records[pos:].strip(b"\0"):
                return  # padding after the last record
            raise BadArchive("has a pax header that is not length-prefixed records")
        end = pos + int(digits)
        record = records[space + 1:end]
        if end > len(records) or not record.endswith(b"\n") or b"=" not in record:
            raise BadArchive("has a pax header with a malformed record")
        keyword, _, value = record[:-1].partition(b"=")
        word = keyword.decode("latin-1")
        if word not in PAX_KEYWORDS:
            raise BadArchive(f"has a pax record {brief(word, 40)}, which no CIFAR-10 archive has")
        if word in PAX_NUMBERS and len(value) > PAX_NUMBER_CHARS_MAX:
            raise BadArchive(f"has a pax {word} of {len(value)} characters")
        pos = end


class _CheckedStream:
    """A read-only file over ``source``: headers checked (:class:`_HeaderScan`), ``limit`` in all.

    Never asks ``source`` for more than one byte past what is left, so one read of a
    size taken from a header cannot allocate beyond the cap either. The scan sees the
    bytes before they are returned: tarfile parses only headers that passed it.
    """

    def __init__(self, source: Any, limit: int) -> None:
        self._source = source
        self._limit = limit
        self._consumed = 0
        self.scan = _HeaderScan()

    def read(self, size: int | None = -1) -> bytes:
        left = self._limit - self._consumed + 1
        wanted = left if size is None or size < 0 else min(size, left)
        chunk: bytes = self._source.read(wanted)
        self._consumed += len(chunk)
        if self._consumed > self._limit:
            raise BadArchive(
                f"unpacks to more than {self._limit} bytes (CIFAR-10: 186 MB)"
            )
        self.scan.feed(chunk)
        return chunk

    # The rest of the file interface tarfile expects; a stream (``r|``) uses none of it.
    def write(self, data: bytes, /) -> int:
        raise io.UnsupportedOperation("the archive is read-only")

    def seek(self, pos: int, /) -> int:
        raise io.UnsupportedOperation("the archive is read in order, once")

    def tell(self) -> int:
        return self._consumed

    def close(self) -> None:
        """The gzip file beneath is closed by its own ``with``."""


def read_members(path: Path, wanted: tuple[str, ...]) -> Iterator[tuple[str, bytes]]:
    """Yield ``(name, bytes)`` for each member of ``wanted``, in archive order.

    Raises :class:`BadArchive` for a header or stream over the caps, a wanted name
    that is not a regular file or appears twice, or one missing at the end; the
    ``tarfile``/``gzip``/``zlib`` errors of a damaged file pass through.
    """
    seen: set[str] = set()
    with (
        open_stream(path, ARCHIVE_FILE_MAX_BYTES) as raw_file,
        gzip.GzipFile(fileobj=raw_file, mode="rb") as unpacked,
        tarfile.open(fileobj=_CheckedStream(unpacked, UNPACKED_MAX_BYTES), mode="r|") as tar,
    ):
        for member in tar:
            if member.name not in wanted:
                continue
            if not member.isfile():
                raise BadArchive(f"holds {member.name} as a folder, not a file")
            if member.name in seen:
                raise BadArchive(f"holds {member.name} twice")
            seen.add(member.name)
            handle = tar.extractfile(member)
            assert handle is not None  # a regular file always has a handle
            raw = handle.read(member.size)
            if len(raw) != member.size:
                raise BadArchive(f"ends inside {member.name}")
            yield member.name, raw
    missing = [name for name in wanted if name not in seen]
    if missing:
        raise BadArchive(f"has no {missing[0]}")
