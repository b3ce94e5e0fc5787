"""workloads.download: a destination only ever holds a complete, verified file."""

from __future__ import annotations

import hashlib
import http.server
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.loopback_http import base_url, loopback_server
from workloads.download import (
    ChecksumMismatch,
    IncompleteDownload,
    fetch_verified,
    md5sum,
    sha256sum,
)

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: more than one read chunk
PAYLOAD_MD5 = hashlib.md5(PAYLOAD, usedforsecurity=False).hexdigest()
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()


@pytest.fixture
def server() -> Iterator[str]:
    """/good sends PAYLOAD; /truncated promises PAYLOAD's length, sends half and hangs up."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            body = PAYLOAD if self.path == "/good" else PAYLOAD[: len(PAYLOAD) // 2]
            if self.path not in ("/good", "/truncated"):
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(PAYLOAD)))
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

    with loopback_server(Handler) as httpd:
        yield base_url(httpd)


def test_verified_file_lands_at_the_destination(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "file.bin"
    assert fetch_verified(f"{server}/good", dest, PAYLOAD_SHA256, timeout=10) == dest
    assert dest.read_bytes() == PAYLOAD
    assert sha256sum(dest) == PAYLOAD_SHA256
    assert sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]


def test_wrong_checksum_keeps_the_old_file_and_no_temp(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"the user's file")
    with pytest.raises(ChecksumMismatch) as caught:
        fetch_verified(f"{server}/good", dest, "0" * 64, timeout=10)
    assert (caught.value.actual, caught.value.expected) == (PAYLOAD_SHA256, "0" * 64)
    assert "has SHA-256" in str(caught.value)
    assert dest.read_bytes() == b"the user's file"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_truncated_transfer_leaves_nothing(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "file.bin"
    with pytest.raises(IncompleteDownload, match=f"stopped after {len(PAYLOAD) // 2} of "):
        fetch_verified(f"{server}/truncated", dest, PAYLOAD_SHA256, timeout=10)
    assert list(tmp_path.iterdir()) == []


def test_unreachable_url_raises_urlerror_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(urllib.error.URLError):
        fetch_verified("http://127.0.0.1:9/gone", tmp_path / "f", PAYLOAD_SHA256, timeout=5)
    assert list(tmp_path.iterdir()) == []


def test_md5_only_when_asked_and_an_md5_never_passes_as_the_default(
    server: str, tmp_path: Path
) -> None:
    """VGG19's publisher gives only an MD5; everything else is checked with SHA-256."""
    dest = tmp_path / "weights.h5"
    with pytest.raises(ChecksumMismatch, match="has SHA-256"):
        fetch_verified(f"{server}/good", dest, PAYLOAD_MD5, timeout=10)
    assert not dest.exists()
    fetch_verified(f"{server}/good", dest, PAYLOAD_MD5, timeout=10, algorithm="md5")
    assert md5sum(dest) == PAYLOAD_MD5
