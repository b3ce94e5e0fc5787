"""Reading the batch files out of ``cifar-10-python.tar.gz`` with bounded memory.

The archive is untrusted (a mirror sets its own checksum, ``--data-dir`` is any
file), and a tar.gz can ask for far more memory than its size: gzip compresses a
run of zeros a thousandfold, a tar header declares any size, and Python's
``tarfile`` reads a pax or GNU long-name header's whole declared size into memory
(and follows a chain of them recursively) before it returns the member. So:

* every header is checked as it is parsed (:class:`_checked_headers`), before a
  byte it describes is read: only files, folders and small extended headers, at
  most :data:`HEADERS_MAX` of them, a file at most :data:`MEMBER_MAX_BYTES`;
* the stream is read once, in order (``r|``), through :class:`_CappedStream`,
  which refuses to unpack more than :data:`UNPACKED_MAX_BYTES` in all.

Each cap is a generous multiple of the real archive, so only a crafted file meets it.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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

_MEMBER_TYPES = {tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE}
_EXTENDED_TYPES = {
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
}


class BadArchive(ValueError):
    """The archive is not one CIFAR-10 tar.gz, or it asks for more than its caps allow."""


class _CappedStream:
    """A read-only file over ``source`` that refuses to return more than ``limit`` bytes.

    Never asks ``source`` for more than one byte past what is left, so one read of a
    size taken from a header cannot allocate beyond the cap either.
    """

    def __init__(self, source: Any, limit: int) -> None:
        self._source = source
        self._limit = limit
        self._consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        left = self._limit - self._consumed + 1
        wanted = left if size is None or size < 0 else min(size, left)
        chunk: bytes = self._source.read(wanted)
        self._consumed += len(chunk)
        if self._consumed > self._limit:
            raise BadArchive(
                f"unpacks to more than {self._limit} bytes (CIFAR-10: 186 MB)"
            )
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


def _check_size(info: tarfile.TarInfo, limit: int) -> None:
    if not 0 <= info.size <= limit:
        raise BadArchive(
            f"declares {brief(info.name, 40)} as {brief(info.size)} bytes, outside the 0 to "
            f"{limit}"
        )


def _checked_headers() -> type[tarfile.TarInfo]:
    """A TarInfo class whose every parsed header is checked; one class per archive read.

    ``frombuf`` is where tarfile turns 512 header bytes into a TarInfo, for members
    and for the extended headers it reads on its own, so a check here comes before
    tarfile reads the data a header announces. The header count lives on the class,
    hence a fresh class for each archive.
    """

    class CheckedTarInfo(tarfile.TarInfo):
        headers = 0

        @classmethod
        def frombuf(cls, buf: bytes | bytearray, encoding: str, errors: str) -> Any:
            info = super().frombuf(buf, encoding, errors)
            CheckedTarInfo.headers += 1
            if CheckedTarInfo.headers > HEADERS_MAX:
                raise BadArchive(f"holds more than {HEADERS_MAX} tar headers (the real one: 9)")
            if info.type in _EXTENDED_TYPES:
                limit = EXTENDED_HEADER_MAX_BYTES
            elif info.type in _MEMBER_TYPES:
                limit = MEMBER_MAX_BYTES
            else:
                raise BadArchive(
                    f"holds {brief(info.name, 40)} of tar type {brief(info.type)}; CIFAR-10 has "
                    "only files and a folder"
                )
            _check_size(info, limit)
            return info

    return CheckedTarInfo


def read_members(path: Path, wanted: tuple[str, ...]) -> Iterator[tuple[str, bytes]]:
    """Yield ``(name, bytes)`` for each member of ``wanted``, in archive order.

    Raises :class:`BadArchive` for a header or stream over the caps, a wanted name
    that is not a regular file or appears twice, or one missing at the end; the
    ``tarfile``/``gzip``/``zlib`` errors of a damaged file pass through.
    """
    seen: set[str] = set()
    with (
        gzip.GzipFile(path, "rb") as unpacked,
        tarfile.open(
            fileobj=_CappedStream(unpacked, UNPACKED_MAX_BYTES),
            mode="r|",
            tarinfo=_checked_headers(),
        ) as tar,
    ):
        for member in tar:
            _check_size(member, MEMBER_MAX_BYTES)  # again: a pax record may have changed it
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
