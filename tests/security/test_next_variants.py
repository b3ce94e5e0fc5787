"""The next variant of two families, through the real CLI (an outside review's attacks).

* **A download redirected to another scheme.** The mirror (127.0.0.1) answers 302 with
  ``Location: ftp://127.0.0.1:PORT/...``. urllib's redirect handler follows http, https
  *and ftp*, and ``build_opener`` adds its FTP handler, whose control connection knows
  nothing of the download's deadline: an FTP server that drips its greeting holds the
  command past any deadline, and one that sends an endless multi-line greeting makes
  ``ftplib`` join it into one string (3.4 GiB in 30 s, measured, before the fix). Each
  case must end within the deadline plus the command's start, in one line, exit 2.
* **A record read by a reader outside :mod:`workloads.bounded`.** ``workloads health
  --expect-gpus-from RECORD`` opened the record with ``Path.open`` (links followed, a
  FIFO blocks for ever, 64 MiB read where every other record reader stops at 16 MiB):
  a FIFO, a link to a record outside, and a record over the record cap are refused.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.security.harness import Budget, FamilyReport, Sandbox, baseline, run_child
from tests.support.loopback_http import base_url, loopback_server

pytestmark = pytest.mark.timeout(300)
DEADLINE_S = 3
TALK_FOR_S = 40  # the FTP server gives up after this, whatever the client does


def _drip_greeting(conn: socket.socket, stop: threading.Event) -> None:
    """``220 ...`` a byte per 0.2 s: each read within any socket timeout."""
    end = time.monotonic() + TALK_FOR_S
    while time.monotonic() < end and not stop.is_set():
        conn.sendall(b"2")
        time.sleep(0.2)


def _endless_greeting(conn: socket.socket, stop: threading.Event) -> None:
    """A multi-line ``220-`` reply that never ends: ftplib joins its lines into one string."""
    line = b"220-" + b"a" * 8000 + b"\r\n"
    end = time.monotonic() + TALK_FOR_S
    while time.monotonic() < end and not stop.is_set():
        conn.sendall(line * 16)


FTP_ANSWERS: dict[str, Callable[[socket.socket, threading.Event], None]] = {
    "ftp-drip-greeting": _drip_greeting,
    "ftp-endless-greeting": _endless_greeting,
}


@contextmanager
def _ftp_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[int]:
    """A loopback TCP server that talks to each connection with ``answer``; yields its port."""
    stop = threading.Event()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)

    def talk(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client left: what is tested
            answer(conn, stop)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=talk, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, name="test-ftp", daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


class _Redirect(BaseHTTPRequestHandler):
    """302 to whatever ``server.location`` is; logs nothing."""

    def do_GET(self) -> None:
        self.close_connection = True
        self.send_response(302)
        self.send_header("Location", self.server.location)  # type: ignore[attr-defined]
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: pytest's output is the suite's."""


def test_a_redirect_to_another_scheme_keeps_the_deadline(tmp_path: Path) -> None:
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=DEADLINE_S + 12)
    argv = ["cifar10", "--data", "cifar10", "--output", str(box.trusted / "results" / "r.json")]
    report = FamilyReport("download redirected (`workloads cifar10`, 302 to ftp/file)", budget)
    with loopback_server(_Redirect) as server:
        env = box.env({"WORKLOADS_CIFAR10_URL": f"{base_url(server)}/cifar-10-python.tar.gz",
                       "WORKLOADS_DOWNLOAD_DEADLINE_S": str(DEADLINE_S)})
        server.location = f"{base_url(server)}/loop"  # type: ignore[attr-defined]
        report.baseline_mib = baseline(argv, box, budget, env)
        for case, answer in FTP_ANSWERS.items():
            with _ftp_server(answer) as port:
                server.location = f"ftp://127.0.0.1:{port}/cifar-10-python.tar.gz"  # type: ignore[attr-defined]
                report.add(case, run_child(argv, box, budget, env=env))
        server.location = (box.outside / "victim.txt").as_uri()  # type: ignore[attr-defined]
        report.add("file-redirect", run_child(argv, box, budget, env=env))
    report.check()


def _health(record: Path, box: Sandbox) -> list[str]:
    return ["health", "--expect-gpus-from", str(record), "--state",
            str(box.trusted / "health-state.json")]


def test_the_record_health_counts_gpus_from_is_read_as_every_record(tmp_path: Path) -> None:
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=20)
    report = FamilyReport("accept record (`workloads health --expect-gpus-from R`)", budget)
    empty = box.trusted / "empty.json"
    empty.write_text("{}")
    report.baseline_mib = baseline(_health(empty, box), box, budget)
    fifo = box.trusted / "fifo.json"
    os.mkfifo(fifo)
    report.add("fifo", run_child(_health(fifo, box), box, budget))
    elsewhere = box.outside / "accept-gpu01.json"
    elsewhere.write_text(json.dumps({"devices": [{"label": "GPU 0", "nvml_index": 0}]}))
    link = box.trusted / "link.json"
    link.symlink_to(elsewhere)
    report.add("link", run_child(_health(link, box), box, budget))
    large = box.trusted / "large.json"  # over the 16 MiB every other record reader allows
    large.write_bytes(b'{"devices": [], "pad": "' + b"a" * (40 << 20) + b'"}')
    outcome = run_child(_health(large, box), box, budget)
    report.add("over-the-record-cap", outcome,
               also=[] if "bytes, over the" in outcome.stderr else ["read whole, not refused"])
    report.check()


def test_a_record_s_text_reaches_report_md_shown(tmp_path: Path) -> None:
    """``workloads report RUN``: every text field of a record (workload, model, devices,
    precision, status) and the record's file name go into report.md's table. They went in
    raw (ESC, BEL, CSI kept for the next ``cat``): the cell function is named as a
    sanitiser is, so the scanner took it for one, but it only escaped ``|``."""
    from tests.security.harness import printed_problems, unprintable

    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=20)
    report = FamilyReport("record text (`workloads report RUN`, report.md)", budget,
                          contract=printed_problems)
    hostile = "\x1b[2J\x07\x9b31m\u202e"
    plain = box.trusted / "plain"
    plain.mkdir()
    (plain / "a.json").write_text(json.dumps({"workload": "cifar10", "status": "done"}))
    report.baseline_mib = baseline(["report", str(plain), "-o", str(box.trusted / "o0")],
                                   box, budget)
    run = box.trusted / "run"
    run.mkdir()
    record = {"workload": "accept" + hostile, "model": "m" + hostile, "status": "done" + hostile,
              "precision": "p" + hostile, "devices": ["GPU" + hostile, "GPU" + hostile]}
    (run / f"r{hostile[:2]}.json").write_text(json.dumps(record))
    output = box.trusted / "out"
    outcome = run_child(["report", str(run), "-o", str(output)], box, budget)
    written = output / "report.md"
    text = written.read_text(errors="replace") if written.is_file() else ""
    report.add("controls in every text field", outcome,
               also=[f"report.md holds {bad!r}" for bad in [unprintable(text)] if bad]
               + ([] if text else ["report.md not written"]))
    report.check()
