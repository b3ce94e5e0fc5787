"""A package index on 127.0.0.1 that passes PyPI through and keeps the files it served.

Why: the tensorflow_host role installs TensorFlow with pip on the target, and its
`tensorflow_host_pip_index_url` is how a site without PyPI points it at a mirror.
The Debian 12 converge installs the role's pinned TensorFlow through this index:
the mirror variable is exercised, the container's pip resolves for its own Python
(no guessing of wheel tags on the host), and the ~700 MB of wheels are fetched from
PyPI once per machine, then served from the cache folder, which outlives the test
(as the VM test's apt proxy keeps Debian's packages).

Index pages (/simple/<project>/) are fetched from PyPI on every request, as PEP 503
HTML with the file links pointed here; files (/files/..., wheels and their PEP 658
metadata) never change once published and are cached. pip checks every file against
the sha256 the index page names, so the cache cannot serve it a changed file.

PEP 658 for every wheel: PyPI has no separate metadata file for some wheels (NVIDIA's
CUDA wheels, 3.2 GB for tensorflow[and-cuda], among them), and without one pip downloads
the whole wheel to read its dependencies. The mirror marks each such wheel's link
`data-core-metadata="true"` (and PEP 658's older `data-dist-info-metadata`), and answers
`<wheel>.metadata` with the wheel's own `*.dist-info/METADATA`, read from PyPI with HTTP
range requests (the zip's directory and that one member: kilobytes, not the wheel), as
PyPI itself serves it for newer uploads. A resolution (`pip install --dry-run --report`)
then transfers metadata only.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
import threading
import urllib.error
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TextIO

from tests.support.loopback_http import base_url, loopback_server

INDEX = "https://pypi.org/simple/"
FILES = "https://files.pythonhosted.org/"
PROJECT = re.compile(r"^/simple/([A-Za-z0-9._-]+)/?$")
CHUNK = 1 << 16
# An index page's link to a wheel: its URL (fragment included) and its other attributes.
WHEEL_LINK = re.compile(r'<a href="([^"#]+\.whl(?:#[^"]*)?)"([^>]*)>')
METADATA_SUFFIX = ".metadata"
DIST_INFO_METADATA = re.compile(r"^[^/]+\.dist-info/METADATA$")
# How much of a wheel each range request reads: the zip's end records and directory, then
# the METADATA member, take a few of these.
RANGE_BUFFER = 1 << 18


@dataclass
class MirrorLog:
    """What the mirror answered: for the test's report and its log file."""

    stream: TextIO
    downloaded_bytes: int = 0
    cached_bytes: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, line: str) -> None:
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def _fetch(url: str, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept,
                                                   "User-Agent": "tfhost-test-mirror"})
    with urllib.request.urlopen(request, timeout=120) as response:
        body: bytes = response.read()
        return body


def with_metadata_for_every_wheel(page: str) -> str:
    """Mark each wheel link that has no PEP 658 metadata attribute as having one ("true").

    PEP 714 names the attribute `data-core-metadata`; pip before 23.2 reads only PEP 658's
    `data-dist-info-metadata`: both are added. A link that has either keeps what PyPI said.
    """
    def mark(link: re.Match[str]) -> str:
        if "metadata=" in link[2]:
            return link[0]
        return (f'<a href="{link[1]}"{link[2]} data-core-metadata="true"'
                ' data-dist-info-metadata="true">')
    return WHEEL_LINK.sub(mark, page)


class RemoteFile(io.RawIOBase):
    """A file on an HTTP server that answers range requests, read where zipfile seeks."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url
        self.position = 0
        self.transferred = 0
        head = urllib.request.Request(url, method="HEAD",
                                      headers={"User-Agent": "tfhost-test-mirror"})
        with urllib.request.urlopen(head, timeout=120) as response:
            self.size = int(response.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer: Any) -> int:
        if self.position >= self.size or len(buffer) == 0:
            return 0
        last = min(self.position + len(buffer), self.size) - 1
        request = urllib.request.Request(self.url, headers={
            "Range": f"bytes={self.position}-{last}", "User-Agent": "tfhost-test-mirror"})
        with urllib.request.urlopen(request, timeout=120) as response:
            if response.status != 206:
                raise OSError(f"{self.url}: the server ignored the range request")
            data = response.read()
        buffer[:len(data)] = data
        self.position += len(data)
        self.transferred += len(data)
        return len(data)


def wheel_metadata(url: str) -> tuple[bytes, int]:
    """The METADATA of the wheel at `url`, and the bytes transferred to read it."""
    remote = RemoteFile(url)
    with zipfile.ZipFile(io.BufferedReader(remote, RANGE_BUFFER)) as wheel:
        [name] = [name for name in wheel.namelist() if DIST_INFO_METADATA.match(name)]
        return wheel.read(name), remote.transferred


def _handler(cache: Path, log: MirrorLog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            log.write(f"{self.address_string()} {format % args}")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            project = PROJECT.match(path)
            try:
                if project is not None:
                    self._index(project[1])
                elif path.startswith("/files/") and ".." not in path:
                    self._file(path.removeprefix("/files/"))
                else:
                    self._send(404, b"not an index page nor a file\n", "text/plain")
            except OSError as error:  # PyPI unreachable or said no: pip reports the status
                log.write(f"upstream for {path}: {error}")
                status = getattr(error, "code", 502)
                self._send(status if isinstance(status, int) else 502, f"{error}\n".encode(),
                           "text/plain")

        def _index(self, project: str) -> None:
            page = _fetch(f"{INDEX}{project}/", "text/html").decode()
            here = f"http://{self.headers['Host']}/files/"
            page = with_metadata_for_every_wheel(page)
            self._send(200, page.replace(FILES, here).encode(), "text/html; charset=utf-8")

        def _fetch_to(self, relative: str, spool: Any) -> int:
            """PyPI's file into `spool`; a wheel's METADATA read from the wheel when PyPI has
            no metadata file for it (the links marked by with_metadata_for_every_wheel).
            Returns the bytes transferred from PyPI."""
            try:
                request = urllib.request.Request(
                    f"{FILES}{relative}", headers={"User-Agent": "tfhost-test-mirror"})
                with urllib.request.urlopen(request, timeout=600) as response:
                    shutil.copyfileobj(response, spool, CHUNK)
                return int(spool.tell())
            except urllib.error.HTTPError as error:
                if error.code != 404 or not relative.endswith(".whl" + METADATA_SUFFIX):
                    raise
                metadata, transferred = wheel_metadata(
                    f"{FILES}{relative.removesuffix(METADATA_SUFFIX)}")
                spool.write(metadata)
                log.write(f"{relative}: read from the wheel, {transferred} bytes transferred")
                return transferred

        def _file(self, relative: str) -> None:
            kept = cache / relative
            if kept.is_file():
                with log.lock:
                    log.cached_bytes += kept.stat().st_size
            else:
                kept.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=kept.parent, delete=False) as spool:
                    try:
                        transferred = self._fetch_to(relative, spool)
                        spool.close()
                        os.replace(spool.name, kept)
                    finally:
                        if os.path.exists(spool.name):
                            os.unlink(spool.name)
                with log.lock:
                    log.downloaded_bytes += transferred
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(kept.stat().st_size))
            self.end_headers()
            with kept.open("rb") as source:
                shutil.copyfileobj(source, self.wfile, CHUNK)

    return Handler


@dataclass(frozen=True)
class PypiMirror:
    """A running mirror: pip's --index-url for it, and what it served."""

    index_url: str
    log: MirrorLog


@contextmanager
def pypi_mirror(cache: Path, log_path: Path) -> Iterator[PypiMirror]:
    """Serve the mirror on an ephemeral loopback port for the duration of the block."""
    cache.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as stream:
        log = MirrorLog(stream)
        with loopback_server(_handler(cache, log), name="pypi-mirror") as server:
            yield PypiMirror(f"{base_url(server)}/simple", log)
