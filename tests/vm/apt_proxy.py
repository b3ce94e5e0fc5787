"""An HTTP proxy on 127.0.0.1 that lets the test VM's apt reach Debian's mirror, and nothing else.

Why: the VM runs behind QEMU's user-mode network with restrict=on, so it can
reach no address at all; the roles still install Debian packages (kernel
headers, docker.io) with real apt. The VM's apt is pointed at this proxy
(`Acquire::http::Proxy`), carried into the guest over the test's SSH connection
(`ssh -R`), so every byte on the host side travels over loopback and the only
outside peer is the package registry the host's own apt uses. Hosts outside
ALLOWED_HOSTS get 403: a role that strays to a vendor repository fails loudly.

Packages under /pool/ never change once published, so they are kept in a cache
folder that outlives the test: a second run on the same machine downloads only
the index files.
"""

from __future__ import annotations

import http.client
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, TextIO
from urllib.parse import urlsplit

from tests.support.loopback_http import loopback_server

ALLOWED_HOSTS = frozenset({"deb.debian.org"})
# Request headers apt sends that change the answer; everything else stays behind.
FORWARDED_REQUEST_HEADERS = ("Range", "If-Range", "If-Modified-Since", "User-Agent")
FORWARDED_RESPONSE_HEADERS = (
    "Content-Type", "Content-Length", "Content-Range", "Accept-Ranges", "Last-Modified",
    "ETag", "Date",
)
CHUNK = 1 << 16


@dataclass
class ProxyLog:
    """What the proxy answered, for tests and for the log file."""

    stream: TextIO
    requests: int = 0
    refused: list[str] = field(default_factory=list)
    cache_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def write(self, line: str) -> None:
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


def _cache_path(cache_dir: Path, host: str, path: str) -> Path | None:
    """Where a pool file is cached; None for anything that may change (indices, Release)."""
    if "/pool/" not in path or not path.endswith(".deb") or ".." in path:
        return None
    return cache_dir / host / path.lstrip("/")


def _handler(cache_dir: Path, log: ProxyLog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.write(f"{self.address_string()} {format % args}")

        def do_GET(self) -> None:
            self._proxy(send_body=True)

        def do_HEAD(self) -> None:
            self._proxy(send_body=False)

        def _refuse(self, status: int, reason: str) -> None:
            body = f"{reason}\n".encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _proxy(self, send_body: bool) -> None:
            url = urlsplit(self.path)
            with log.lock:
                log.requests += 1
            if url.scheme != "http" or url.hostname not in ALLOWED_HOSTS:
                with log.lock:
                    log.refused.append(self.path)
                self._refuse(403, f"the test proxy only forwards to {sorted(ALLOWED_HOSTS)}")
                return
            target = url.path + (f"?{url.query}" if url.query else "")
            cached = _cache_path(cache_dir, url.hostname, url.path)
            if cached is not None and cached.is_file() and "Range" not in self.headers:
                with log.lock:
                    log.cache_hits += 1
                self._send_file(cached, send_body)
                return
            self._forward(url.hostname, url.port or 80, target, cached, send_body)

        def _send_file(self, path: Path, send_body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.debian.binary-package")
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            if send_body:
                with path.open("rb") as source:
                    shutil.copyfileobj(source, self.wfile, CHUNK)

        def _forward(self, host: str, port: int, target: str, cached: Path | None,
                     send_body: bool) -> None:
            headers = {name: self.headers[name] for name in FORWARDED_REQUEST_HEADERS
                       if name in self.headers}
            upstream = http.client.HTTPConnection(host, port, timeout=60)
            try:
                upstream.request(self.command, target, headers=headers)
                response = upstream.getresponse()
                length = response.getheader("Content-Length")
                self.send_response(response.status, response.reason)
                for name in FORWARDED_RESPONSE_HEADERS:
                    value = response.getheader(name)
                    if value is not None:
                        self.send_header(name, value)
                if length is None:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if not send_body:
                    return
                keep = cached if response.status == 200 and length is not None else None
                self._relay(response, keep, int(length) if length is not None else None)
            except OSError as error:
                log.write(f"upstream {host}{target}: {error}")
                self.close_connection = True
            finally:
                upstream.close()

        def _relay(self, response: http.client.HTTPResponse, keep: Path | None,
                   length: int | None) -> None:
            """Stream the body to apt; keep a complete pool file in the cache."""
            if keep is None:
                while chunk := response.read(CHUNK):
                    self.wfile.write(chunk)
                return
            keep.parent.mkdir(parents=True, exist_ok=True)
            received = 0
            with tempfile.NamedTemporaryFile(dir=keep.parent, delete=False) as spool:
                try:
                    while chunk := response.read(CHUNK):
                        received += len(chunk)
                        self.wfile.write(chunk)
                        spool.write(chunk)
                finally:
                    spool.close()
                    if received == length:
                        os.replace(spool.name, keep)
                    else:
                        os.unlink(spool.name)

    return Handler


@dataclass(frozen=True)
class AptProxy:
    """A running proxy: its loopback port and what it has answered."""

    port: int
    log: ProxyLog

    def apt_config(self) -> str:
        """apt.conf lines for a guest that reaches this port on its own 127.0.0.1."""
        return (
            f'Acquire::http::Proxy "http://127.0.0.1:{self.port}/";\n'
            # Stub repositories are forwarded to the guest's loopback directly.
            'Acquire::http::Proxy::127.0.0.1 "DIRECT";\n'
        )


@contextmanager
def apt_proxy(cache_dir: Path, log_path: Path) -> Iterator[AptProxy]:
    """Run the proxy on an ephemeral loopback port for the duration of the block."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as stream:
        log = ProxyLog(stream)
        with loopback_server(_handler(cache_dir, log), name="apt-proxy") as server:
            yield AptProxy(server.server_address[1], log)
