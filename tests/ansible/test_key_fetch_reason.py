"""The key server's reason phrase reaches the play's failure message as escapes, never raw.

``repo_trust_fetch`` reports a failed fetch as ``HTTP <status> <reason>``, and Ansible
prints that message to the operator's terminal. The reason phrase is the server's:
generated here (Hypothesis) from every byte a status line can carry but CR and LF
(ESC, BEL, DEL, the C1 controls 0x80-0x9f as Latin-1, which is how ``http.client``
reads them), served from 127.0.0.1 with a 404, and the module run as Ansible runs it
(a child process given its arguments file). The message holds no control character,
shows what was sent as escapes, and stays short. Before (issue 48): it held them raw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.loopback_http import loopback_server

ROLE = Path(__file__).resolve().parents[2] / "ansible/roles/repo_trust"
MODULE = ROLE / "library/repo_trust_fetch.py"
REASON_BYTES = [b for b in range(256) if b not in (0x0a, 0x0d)]


def _handler(reason: str) -> type[BaseHTTPRequestHandler]:
    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404, reason)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Refuse


def _fetch(url: str, tmp: Path) -> dict[str, Any]:
    arguments = tmp / "args.json"
    arguments.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"url": url, "timeout": 10}}))
    env = {**os.environ, "no_proxy": "*", "NO_PROXY": "*"}
    result = subprocess.run([sys.executable, str(MODULE), str(arguments)], capture_output=True,
                            text=True, timeout=120, check=False, env=env)
    return dict(json.loads(result.stdout))


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(reason=st.lists(st.sampled_from(REASON_BYTES), min_size=1, max_size=300)
       .map(lambda values: bytes(values).decode("latin-1")))
def test_the_reason_phrase_is_shown_not_sent_to_the_terminal(tmp_path: Path, reason: str) -> None:
    with loopback_server(_handler(reason)) as server:
        answer = _fetch(f"http://127.0.0.1:{server.server_address[1]}/key.asc", tmp_path)
    message = answer["msg"]
    assert answer.get("failed") and "HTTP 404" in message
    assert message.isprintable(), message
    assert len(message) <= 400


def test_a_terminal_escape_in_the_reason_is_shown_as_one(tmp_path: Path) -> None:
    with loopback_server(_handler("Not Found\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J")) as server:
        message = _fetch(f"http://127.0.0.1:{server.server_address[1]}/k", tmp_path)["msg"]
    assert "Not Found\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[2J" in message, message
