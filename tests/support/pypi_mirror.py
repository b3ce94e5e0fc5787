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
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import urllib.request
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
            self._send(200, page.replace(FILES, here).encode(), "text/html; charset=utf-8")

        def _file(self, relative: str) -> None:
            kept = cache / relative
            if kept.is_file():
                with log.lock:
                    log.cached_bytes += kept.stat().st_size
            else:
                kept.parent.mkdir(parents=True, exist_ok=True)
                with tempfile.NamedTemporaryFile(dir=kept.parent, delete=False) as spool:
                    try:
                        request = urllib.request.Request(
                            f"{FILES}{relative}", headers={"User-Agent": "tfhost-test-mirror"})
                        with urllib.request.urlopen(request, timeout=600) as response:
                            shutil.copyfileobj(response, spool, CHUNK)
                        spool.close()
                        os.replace(spool.name, kept)
                    finally:
                        if os.path.exists(spool.name):
                            os.unlink(spool.name)
                with log.lock:
                    log.downloaded_bytes += kept.stat().st_size
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
