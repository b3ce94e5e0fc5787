"""workloads.download: a destination only ever holds a complete, verified file."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import tempfile
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.loopback_http import base_url, loopback_server
from workloads.download import (
    ChecksumMismatch,
    DownloadTooLarge,
    IncompleteDownload,
    fetch_verified,
    md5sum,
    sha256sum,
)

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: more than one read chunk
PAYLOAD_MD5 = hashlib.md5(PAYLOAD, usedforsecurity=False).hexdigest()
PAYLOAD_SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
CAP = 2 * len(PAYLOAD)


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
    assert fetch_verified(f"{server}/good", dest, PAYLOAD_SHA256, timeout=10, max_bytes=CAP) == dest
    assert dest.read_bytes() == PAYLOAD
    assert sha256sum(dest) == PAYLOAD_SHA256
    assert sorted(p.name for p in dest.parent.iterdir()) == ["file.bin"]


def test_wrong_checksum_keeps_the_old_file_and_no_temp(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "file.bin"
    dest.write_bytes(b"the user's file")
    with pytest.raises(ChecksumMismatch) as caught:
        fetch_verified(f"{server}/good", dest, "0" * 64, timeout=10, max_bytes=CAP)
    assert (caught.value.actual, caught.value.expected) == (PAYLOAD_SHA256, "0" * 64)
    assert "has SHA-256" in str(caught.value)
    assert dest.read_bytes() == b"the user's file"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_truncated_transfer_leaves_nothing(server: str, tmp_path: Path) -> None:
    dest = tmp_path / "file.bin"
    with pytest.raises(IncompleteDownload, match=f"stopped after {len(PAYLOAD) // 2} of "):
        fetch_verified(f"{server}/truncated", dest, PAYLOAD_SHA256, timeout=10, max_bytes=CAP)
    assert list(tmp_path.iterdir()) == []


def test_unreachable_url_raises_urlerror_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(urllib.error.URLError):
        fetch_verified(
            "http://127.0.0.1:9/gone", tmp_path / "f", PAYLOAD_SHA256, timeout=5, max_bytes=CAP
        )
    assert list(tmp_path.iterdir()) == []


def test_md5_only_when_asked_and_an_md5_never_passes_as_the_default(
    server: str, tmp_path: Path
) -> None:
    """VGG19's publisher gives only an MD5; everything else is checked with SHA-256."""
    dest = tmp_path / "weights.h5"
    with pytest.raises(ChecksumMismatch, match="has SHA-256"):
        fetch_verified(f"{server}/good", dest, PAYLOAD_MD5, timeout=10, max_bytes=CAP)
    assert not dest.exists()
    fetch_verified(f"{server}/good", dest, PAYLOAD_MD5, timeout=10, max_bytes=CAP, algorithm="md5")
    assert md5sum(dest) == PAYLOAD_MD5


# --- the size cap: the family of lengths a server can announce and send -------------------

SMALL_CAP = 64 << 10


def _body(length: int) -> bytes:
    return (bytes(range(256)) * (length // 256 + 1))[:length]


@pytest.fixture(scope="module")
def sizing_server() -> Iterator[str]:
    """/<sent>/<announced>: sends ``sent`` bytes, with Content-Length ``announced`` ('-': none).

    Without a Content-Length the body ends when the connection closes (HTTP/1.0), so
    the client cannot know the size before reading: only the read itself can be capped.
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            sent, announced = self.path.strip("/").split("/")
            self.send_response(200)
            if announced != "-":
                self.send_header("Content-Length", announced)
            self.end_headers()
            with contextlib.suppress(OSError):  # the client stops at its cap and hangs up
                self.wfile.write(_body(int(sent)))
            self.close_connection = True

    with loopback_server(Handler) as httpd:
        yield base_url(httpd)


@settings(max_examples=40)
@given(
    sent=st.sampled_from([0, 1000, SMALL_CAP - 1, SMALL_CAP, SMALL_CAP + 1, 3 * SMALL_CAP]),
    announced=st.sampled_from(["none", "exact", "less", "more", "huge"]),
)
def test_a_download_is_within_the_cap_complete_and_verified_or_leaves_nothing(
    sizing_server: str, sent: int, announced: str
) -> None:
    header = {
        "none": "-",
        "exact": str(sent),
        "less": str(max(sent - 100, 0)),
        "more": str(sent + 100),
        "huge": str(1 << 40),
    }[announced]
    expected = hashlib.sha256(_body(sent)).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "file.bin"
        try:
            fetch_verified(
                f"{sizing_server}/{sent}/{header}", dest, expected, timeout=10, max_bytes=SMALL_CAP
            )
            outcome: type[Exception] | None = None
        except (DownloadTooLarge, IncompleteDownload, ChecksumMismatch) as exc:
            outcome = type(exc)
            assert list(Path(tmp).iterdir()) == []  # no temp file, no partial file
        else:
            assert dest.read_bytes() == _body(sent)
            assert [p.name for p in Path(tmp).iterdir()] == ["file.bin"]
    length = int(header) if header != "-" else None
    if length is not None and length > SMALL_CAP:
        assert outcome is DownloadTooLarge  # refused on the header, before the body
    elif length is None:
        assert outcome is (DownloadTooLarge if sent > SMALL_CAP else None)
    elif length < sent:
        assert outcome is ChecksumMismatch  # the client reads only what was announced
    elif length > sent:
        assert outcome is IncompleteDownload
    else:
        assert outcome is None


def test_an_oversized_body_is_cut_at_the_cap_and_says_so(
    sizing_server: str, tmp_path: Path
) -> None:
    with pytest.raises(DownloadTooLarge, match=f"sent more, over the {SMALL_CAP}-byte cap"):
        fetch_verified(
            f"{sizing_server}/{10 * SMALL_CAP}/-", tmp_path / "f", "0" * 64,
            timeout=10, max_bytes=SMALL_CAP,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(DownloadTooLarge, match=f"announces {1 << 40} bytes, over the"):
        fetch_verified(
            f"{sizing_server}/10/{1 << 40}", tmp_path / "f", "0" * 64,
            timeout=10, max_bytes=SMALL_CAP,
        )  # fmt: skip
    assert list(tmp_path.iterdir()) == []
