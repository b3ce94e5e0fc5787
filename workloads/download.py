"""Verified downloads: a file appears at its destination only once its MD5 matches.

Why one module: the CIFAR-10 archive and the VGG19 weights are fetched the same way
(temp file beside the target, checksum, atomic rename), and a half-written or wrong file
in the cache must never be mistaken for a good one. This module raises the low-level
errors; each caller words the one-line message its users need (which mirror variable,
which file to copy where).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

CHUNK = 1 << 20


class ChecksumMismatch(Exception):
    """The downloaded bytes are not the expected file (truncated, or another file)."""

    def __init__(self, url: str, actual: str, expected: str) -> None:
        super().__init__(f"{url} has MD5 {actual}, expected {expected}")
        self.url = url
        self.actual = actual
        self.expected = expected


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


def md5sum(path: Path) -> str:
    """MD5 of a file, read in chunks (the archives are larger than one read should be)."""
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_verified(url: str, dest: Path, md5: str, *, timeout: float) -> Path:
    """Download ``url`` to ``dest`` through a temp file in the same folder.

    Raises ``urllib.error.URLError`` or ``OSError`` (``IncompleteDownload`` for a
    connection that closed early) when the transfer or the cache folder fails,
    ``ChecksumMismatch`` when the bytes are wrong. In every failure
    the temp file is removed and ``dest`` is left as it was.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            shutil.copyfileobj(response, out, CHUNK)
            announced = response.headers.get("Content-Length")
            received = out.tell()
        if announced is not None and announced.isdigit() and received != int(announced):
            raise IncompleteDownload(url, received, int(announced))
        actual = md5sum(tmp)
        if actual != md5:
            raise ChecksumMismatch(url, actual, md5)
        tmp.replace(dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
