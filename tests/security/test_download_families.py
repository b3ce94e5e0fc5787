"""Issue 48, item 4, for downloads: servers that misbehave, through the real CLI.

``workloads cifar10 --data cifar10`` with an empty cache downloads the archive from
``WORKLOADS_CIFAR10_URL``; here that is a loopback server (127.0.0.1 only) that
answers each case's way: dripping its status line, headers or body a byte at a
time, a status line that is not HTTP, too many or too long headers, a chunk size
that is not a number, a body cut short, control characters in its reason phrase.
Each run must end within the download deadline (``WORKLOADS_DOWNLOAD_DEADLINE_S``,
3 s here) plus the command's start, exit 2 with one printable line, and leave
nothing outside the trusted directory (the cache is inside it). The Ansible
module ``repo_trust_fetch`` is held to its own ``deadline`` the same way.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.security.harness import REPO, Budget, FamilyReport, Sandbox, baseline, run_child
from tests.support.loopback_http import base_url, loopback_server

pytestmark = pytest.mark.timeout(600)
DEADLINE_S = 3
DRIP_PAUSE_S = 0.2  # far under any socket timeout: only an overall deadline stops it
DRIP_FOR_S = 60  # the server gives up after this, whatever the client does


def _drip(handler: BaseHTTPRequestHandler, head: bytes, tail: bytes) -> None:
    """Send ``head``, then ``tail`` one byte per pause, repeated, until the client leaves."""
    handler.wfile.write(head)
    handler.wfile.flush()
    stop = time.monotonic() + DRIP_FOR_S
    while time.monotonic() < stop and not handler.server.stopping.is_set():  # type: ignore[attr-defined]
        for byte in tail:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(DRIP_PAUSE_S)


def _send(raw: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    def answer(handler: BaseHTTPRequestHandler) -> None:
        handler.wfile.write(raw)
        handler.wfile.flush()
    return answer


OK = b"HTTP/1.1 200 OK\r\n"
ANSWERS: dict[str, Callable[[BaseHTTPRequestHandler], None]] = {
    "drip-status-line": lambda h: _drip(h, b"", b"HTTP/1.1 200 OK"),
    "drip-headers": lambda h: _drip(h, OK, b"X-Slow: a\r\n"),
    "drip-body": lambda h: _drip(h, OK + b"Content-Length: 100000\r\n\r\n", b"x"),
    "bad-status-line": _send(b"NOT HTTP AT ALL\r\n\r\n"),
    "bad-status-code": _send(b"HTTP/1.1 2x0 OK\r\n\r\n"),
    "too-many-headers": _send(OK + b"".join(b"X-%d: 1\r\n" % i for i in range(150)) + b"\r\n"),
    "long-header": _send(OK + b"X-Long: " + b"a" * 70_000 + b"\r\n\r\n"),
    "long-status-line": _send(b"HTTP/1.1 200 " + b"O" * 70_000 + b"\r\n\r\n"),
    "bad-chunk-size": _send(OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"),
    "short-body": _send(OK + b"Content-Length: 1000\r\n\r\n" + b"x" * 10),
    "no-response": _send(b""),
    "control-reason": _send(b"HTTP/1.1 404 \x1b[31mgone\x07\x9b\r\nContent-Length: 0\r\n\r\n"),
    "bad-length": _send(OK + b"Content-Length: 1_0\r\n\r\n"),
}


class _Answer(BaseHTTPRequestHandler):
    """Answers every GET the way the server's current case says; logs nothing."""

    def do_GET(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):  # the client gave up: what the deadline is for
            ANSWERS[self.server.case](self)  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest's output is the suite's."""


@contextmanager
def _server() -> Iterator[ThreadingHTTPServer]:
    with loopback_server(_Answer) as server:
        server.stopping = threading.Event()  # type: ignore[attr-defined]
        server.daemon_threads = True
        try:
            yield server
        finally:
            server.stopping.set()  # type: ignore[attr-defined]


def test_misbehaving_servers_end_in_one_line_within_the_deadline(tmp_path: Path) -> None:
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=DEADLINE_S + 12)
    argv = ["cifar10", "--data", "cifar10", "--output", str(box.trusted / "results" / "r.json")]
    report = FamilyReport("download (`workloads cifar10`, a loopback mirror)", budget)
    with _server() as server:
        env = box.env({"WORKLOADS_CIFAR10_URL": f"{base_url(server)}/cifar-10-python.tar.gz",
                       "WORKLOADS_DOWNLOAD_DEADLINE_S": str(DEADLINE_S)})
        server.case = "no-response"  # type: ignore[attr-defined]
        report.baseline_mib = baseline(argv, box, budget, env)
        for case in ANSWERS:
            server.case = case  # type: ignore[attr-defined]
            report.add(case, run_child(argv, box, budget, env=env))
    report.check()


def test_the_key_fetch_keeps_its_deadline(tmp_path: Path) -> None:
    """repo_trust_fetch, run as Ansible runs a module, against each dripping server.

    Its ``timeout`` (30 s) bounds one read of the socket; a byte every 0.2 s never
    trips it. Only the ``deadline`` over the whole fetch ends these.
    """
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=DEADLINE_S + 12)
    module = REPO / "ansible" / "roles" / "repo_trust" / "library" / "repo_trust_fetch.py"
    lines = []
    with _server() as server:
        for case in ("drip-status-line", "drip-headers", "drip-body", "bad-chunk-size"):
            server.case = case  # type: ignore[attr-defined]
            args = box.trusted / f"{case}.json"
            args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
                "url": f"{base_url(server)}/key.gpg", "deadline": DEADLINE_S, "timeout": 30}}))
            outcome = run_child([sys.executable, str(module), str(args)], box, budget)
            result = json.loads(outcome.stdout or "{}")
            lines.append(f"{case}: {outcome.wall_s:.1f} s {result.get('msg')}")
            assert not outcome.killed and outcome.wall_s <= budget.wall_s, lines[-1]
            assert result.get("failed") is True and "Traceback" not in outcome.stderr, lines[-1]
            assert "\n" not in result["msg"] and len(result["msg"]) <= 300, lines[-1]
            expected = "broke off or is not HTTP" if case == "bad-chunk-size" else "took more than"
            assert expected in result["msg"], lines[-1]
            assert not outcome.changed_outside
    print("", *lines, sep="\n  ")
