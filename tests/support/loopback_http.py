"""HTTP servers on 127.0.0.1 for the length of a test block: the one way tests serve anything.

Why one helper: the stub apt repositories, the fake NGC registry, the VM's apt proxy and
the download mirrors all need the same thread start and orderly shutdown, and the
network rule (tests talk to loopback only) then lives in one place. A thread, not a
process, so nothing can outlive the test session.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TextIO


@contextmanager
def loopback_server(
    handler: Callable[..., BaseHTTPRequestHandler], *ports: int, name: str = "test-http"
) -> Iterator[ThreadingHTTPServer]:
    """Serve ``handler`` on the first of ``ports`` that is free (default: any port).

    A fixed port first, then 0, keeps a URL stable across runs where that matters (a
    Docker build cache key) without failing when the port is taken.
    """
    server: ThreadingHTTPServer | None = None
    for index, port in enumerate(ports or (0,)):
        try:
            server = ThreadingHTTPServer(("127.0.0.1", port), handler)
            break
        except OSError:
            if index == len(ports) - 1:
                raise
    assert server is not None
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def base_url(server: ThreadingHTTPServer) -> str:
    """``http://127.0.0.1:PORT`` (no trailing slash)."""
    return f"http://127.0.0.1:{server.server_address[1]}"


class QuietFileHandler(SimpleHTTPRequestHandler):
    """Serves files; logs to ``log_file`` when one is set, never to stderr (pytest output)."""

    log_file: TextIO | None = None

    def log_message(self, format: str, *args: Any) -> None:
        if self.log_file is not None:
            self.log_file.write(f"{self.address_string()} {format % args}\n")
            self.log_file.flush()


@contextmanager
def serve_directory(root: Path, log_path: Path | None = None,
                    name: str = "test-files") -> Iterator[str]:
    """Serve ``root`` on an ephemeral loopback port; yields the base URL."""
    with log_path.open("a") if log_path is not None else nullcontext() as log:
        handler = type("Handler", (QuietFileHandler,), {"log_file": log})
        with loopback_server(functools.partial(handler, directory=str(root)),
                             name=name) as server:
            yield base_url(server)
