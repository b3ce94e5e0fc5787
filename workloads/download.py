"""Verified downloads: a file appears at its destination only once its checksum matches.

Why one module: the CIFAR-10 archive and the VGG19 weights are fetched the same way
(temp file beside the target, size cap, checksum, atomic rename), and a half-written or
wrong file in the cache must never be mistaken for a good one. This module raises the low-level
errors; each caller words the one-line message its users need (which mirror variable,
which file to copy where).

SHA-256 is the default: MD5 collides, so it only tells a truncated file from a good one,
never a crafted file from a good one. MD5 stays available for the VGG19 weights, whose
publisher (Keras) gives no other digest.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import BinaryIO, Literal

CHUNK = 1 << 20
Algorithm = Literal["sha256", "md5"]
LABELS: dict[str, str] = {"sha256": "SHA-256", "md5": "MD5"}


class ChecksumMismatch(Exception):
    """The downloaded bytes are not the expected file (truncated, or another file)."""

    def __init__(self, url: str, actual: str, expected: str, algorithm: Algorithm) -> None:
        super().__init__(f"{url} has {LABELS[algorithm]} {actual}, expected {expected}")
        self.url = url
        self.actual = actual
        self.expected = expected
        self.algorithm = algorithm


class IncompleteDownload(OSError):
    """The server closed the connection before sending the length it announced.

    An OSError, so callers treat it like any other failed transfer (retry, or copy
    the file by hand) rather than as a wrong file.
    """

    def __init__(self, url: str, received: int, expected: int) -> None:
        super().__init__(f"the transfer stopped after {received} of {expected} bytes")
        self.url = url
        self.received = received
        self.expected = expected


class DownloadTooLarge(OSError):
    """The server announced or sent more than the caller's cap: it is not the expected file.

    Each caller sets the cap at a generous multiple of the real file, so only a wrong
    URL, a broken mirror or a hostile server meets it; the transfer stops there rather
    than filling the cache's disk. An OSError, so a caller without its own wording
    still reports it as a failed download.
    """

    def __init__(self, url: str, size: int, limit: int, *, announced: bool) -> None:
        what = f"announces {size} bytes" if announced else "sent more"
        super().__init__(f"the server {what}, over the {limit}-byte cap for this file")
        self.url = url
        self.size = size
        self.limit = limit
        self.announced = announced


def file_digest(path: Path, algorithm: Algorithm) -> str:
    """Hex digest of a file, read in chunks (the archives are larger than one read should be)."""
    digest = hashlib.new(algorithm, usedforsecurity=algorithm != "md5")
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def sha256sum(path: Path) -> str:
    """SHA-256 of a file: what every new checksum in this project uses."""
    return file_digest(path, "sha256")


def md5sum(path: Path) -> str:
    """MD5 of a file: only for files whose publisher gives nothing stronger (VGG19)."""
    return file_digest(path, "md5")


def fetch_verified(
    url: str,
    dest: Path,
    expected: str,
    *,
    timeout: float,
    max_bytes: int,
    algorithm: Algorithm = "sha256",
) -> Path:
    """Download ``url`` to ``dest`` through a temp file in the same folder.

    At most ``max_bytes`` are accepted: a larger Content-Length is refused before
    the body is read, and a body that runs past the cap (no Content-Length, or
    chunked) is cut one byte after it. Raises ``urllib.error.URLError`` or
    ``OSError`` (``IncompleteDownload`` for a connection that closed early,
    ``DownloadTooLarge`` over the cap) when the transfer or the cache folder fails,
    ``ChecksumMismatch`` when the bytes are wrong. In every failure the temp file
    is removed and ``dest`` is left as it was.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            header = response.headers.get("Content-Length")
            announced = int(header) if header is not None and header.isdigit() else None
            if announced is not None and announced > max_bytes:
                raise DownloadTooLarge(url, announced, max_bytes, announced=True)
            received = _copy_capped(response, out, max_bytes)
            if received > max_bytes:
                raise DownloadTooLarge(url, received, max_bytes, announced=False)
        if announced is not None and received != announced:
            raise IncompleteDownload(url, received, announced)
        actual = file_digest(tmp, algorithm)
        if actual != expected.lower():
            raise ChecksumMismatch(url, actual, expected, algorithm)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def _copy_capped(source: BinaryIO, out: BinaryIO, max_bytes: int) -> int:
    """Copy at most ``max_bytes + 1`` bytes (one past the cap shows the body is too long)."""
    received = 0
    while received <= max_bytes:
        chunk = source.read(min(CHUNK, max_bytes + 1 - received))
        if not chunk:
            break
        out.write(chunk)
        received += len(chunk)
    return received
