"""A registry endpoint on 127.0.0.1 that answers `docker login` like nvcr.io.

Why: nvcr.io is unreachable from CI, but the ngc role's login must run for
real (the Docker daemon on the target talks to a registry, the CLI writes the
config file). `docker login` only needs the registry's /v2/ ping: 401 with a
Basic challenge, then 200 for the right credentials. This server implements
exactly that, and counts attempts so the test can tell a fresh login from a
skipped one. It never stores or logs the password it receives.
"""

from __future__ import annotations

import base64
import hmac
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.loopback_http import loopback_server


@dataclass
class LoginLog:
    """Outcomes of the login attempts the registry saw: (username, accepted)."""

    attempts: list[tuple[str, bool]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, username: str, accepted: bool) -> None:
        with self.lock:
            self.attempts.append((username, accepted))

    @property
    def accepted(self) -> int:
        with self.lock:
            return sum(1 for _, ok in self.attempts if ok)


@dataclass(frozen=True)
class FakeRegistry:
    """Address of the running registry and what it has seen."""

    address: str  # host:port, as written in `docker login HOST:PORT`
    logins: LoginLog


def _handler(username: str, password: str, logins: LoginLog) -> type[BaseHTTPRequestHandler]:
    expected = base64.b64encode(f"{username}:{password}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Silent: the Authorization header must not end up in any log."""

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v2":
                self.send_error(404)
                return
            header = self.headers.get("Authorization", "")
            if not header.startswith("Basic "):
                self._reply(401)
                return
            given = header.removeprefix("Basic ").strip()
            try:
                user = base64.b64decode(given).decode().split(":", 1)[0]
            except ValueError:
                user = "?"
            accepted = hmac.compare_digest(given, expected)
            logins.record(user, accepted)
            self._reply(200 if accepted else 401)

        def _reply(self, status: int) -> None:
            body = b"{}" if status == 200 else b'{"errors":[{"code":"UNAUTHORIZED"}]}'
            self.send_response(status)
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            self.send_header("Content-Type", "application/json")
            if status == 401:
                self.send_header("WWW-Authenticate", 'Basic realm="fake-ngc"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@contextmanager
def fake_registry(username: str, password: str) -> Iterator[FakeRegistry]:
    """Run the registry on an ephemeral loopback port for the duration of the block."""
    logins = LoginLog()
    with loopback_server(_handler(username, password, logins), name="fake-ngc") as server:
        yield FakeRegistry(f"127.0.0.1:{server.server_address[1]}", logins)
