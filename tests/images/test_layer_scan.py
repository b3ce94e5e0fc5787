"""The layer scan finds every needle however the export is cut, and waits out a slow engine.

Why a stand-in engine here: CI's run of the ngc image check failed with
``ReadTimeout (read timeout=60)``. dockerd 20.10 writes a whole ``docker save``
export to a temporary folder before it answers, and for the 2.5 GB ngc image on
a busy 2-core machine that took longer than docker-py's default of 60 s. The
stand-in answers the export's request only after a delay longer than docker-py's
default (both scaled down: 1 s default, 3 s delay), as dockerd does with a big
image; the real engine runs the same scan in test_ngc_dockerfile.py.
"""

from __future__ import annotations

import http.server
import io
import itertools
import json
import socketserver
import tarfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.images.layer_scan import layers_holding, needles_in

SECRET = b"# a build secret that must stay out of every layer"
IMAGE_ID = "sha256:" + "ab" * 32


def _export(payload: bytes) -> bytes:
    """A ``docker save``-shaped tar: one layer tar holding one file with ``payload``."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        info = tarfile.TarInfo("etc/ssl/certs/build-ca.pem")
        info.size = len(payload)
        tar.addfile(info, io.BytesIO(payload))
    outer = io.BytesIO()
    with tarfile.open(fileobj=outer, mode="w") as tar:
        info = tarfile.TarInfo("ab" * 32 + "/layer.tar")
        info.size = len(layer.getvalue())
        tar.addfile(info, io.BytesIO(layer.getvalue()))
    return outer.getvalue()


class _SlowExportEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Answers what ``images.get(...).save()`` asks, the export only after ``delay_s``."""

    daemon_threads = True

    def __init__(self, path: Path, export: bytes, delay_s: float) -> None:
        self.export, self.delay_s = export, delay_s
        super().__init__(str(path), _EngineHandler)


class _EngineHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _SlowExportEngine

    def address_string(self) -> str:  # a unix socket has no client address
        return "unix"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.endswith("/version"):
            self._send(json.dumps({"ApiVersion": "1.41", "Version": "20.10.24"}).encode(),
                       "application/json")
        elif self.path.endswith("/json"):
            self._send(json.dumps({"Id": IMAGE_ID, "RepoTags": ["stand-in:latest"]}).encode(),
                       "application/json")
        elif self.path.endswith(f"/images/{IMAGE_ID}/get"):
            time.sleep(self.server.delay_s)  # dockerd writes the export out first
            self._send(self.server.export, "application/x-tar")
        else:
            self.send_error(404)

    def _send(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def slow_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A stand-in engine whose export takes longer than docker-py's default: its address.

    Given to the scan as an argument, not in DOCKER_HOST: the background jobs' plays and
    containers read DOCKER_HOST while this test runs (one of them once got this engine's
    404 for its `docker exec`).
    """
    import docker.client

    monkeypatch.setattr(docker.client, "DEFAULT_TIMEOUT_SECONDS", 1)
    engine = _SlowExportEngine(tmp_path / "engine.sock",
                               _export(b"-----BEGIN CERTIFICATE-----\n" + SECRET), delay_s=3)
    thread = threading.Thread(target=engine.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"unix://{tmp_path / 'engine.sock'}"
    finally:
        engine.shutdown()
        engine.server_close()


def test_the_scan_waits_for_an_export_slower_than_the_client_default(slow_engine: str) -> None:
    found = layers_holding("stand-in:latest", [SECRET, b"BEGIN CERTIFICATE", b"not there"],
                           docker_host=slow_engine)
    assert found == {SECRET, b"BEGIN CERTIFICATE"}


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=300),
       needles=st.lists(st.binary(min_size=1, max_size=12), max_size=4),
       draw=st.data())
def test_needles_are_found_however_the_stream_is_cut(data: bytes, needles: list[bytes],
                                                      draw: st.DataObject) -> None:
    """Every needle in the whole stream is found, and only those, for any cut into chunks
    (chunks shorter than a needle, and empty ones, included); the first two needles are
    planted in the middle, so cuts often fall inside them."""
    planted = data
    for needle in needles[:2]:
        middle = len(planted) // 2
        planted = planted[:middle] + needle + planted[middle:]
    cuts = draw.draw(st.lists(st.integers(min_value=0, max_value=len(planted)), max_size=40))
    bounds = sorted([0, len(planted), *cuts])
    chunks = [planted[start:end] for start, end in itertools.pairwise(bounds)]
    assert needles_in(chunks, needles) == {needle for needle in needles if needle in planted}
