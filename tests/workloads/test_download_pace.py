"""A download's server may lie in its header or drip its body: refused in one line, in bounded time.

Two servers on 127.0.0.1 play the cases that were shown: one sends a Content-Length
that only looks like a number (``²`` passes ``str.isdigit`` and breaks ``int``;
``1_000`` and `` 12`` pass ``int``), the other sends its body a few bytes at a time,
each within the socket's timeout, for ever. Both end in one line, exit 2, through
``workloads cifar10`` as a user runs it; the family of header values is generated.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.loopback_http import base_url, loopback_server
from tests.workloads.conftest import assert_one_line_error, run_cli
from workloads.download import (
    DEADLINE_ENV,
    MIN_RATE_ENV,
    WINDOW_ENV,
    BadContentLength,
    DownloadTooLarge,
    Pace,
    TooSlow,
    content_length,
    fetch_verified,
    pace_from_env,
)
from workloads.errors import WorkloadError

BODY = bytes(range(256)) * 8
DRIP_SECONDS = 30  # a dripping handler gives up after this, whatever the client does


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """/lie/<hex of the header bytes>: that Content-Length, then BODY.
    /drip/<bytes per step>: a large Content-Length, then that many bytes every 20 ms."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            kind, value = self.path.strip("/").split("/")
            value = value.removeprefix("x")
            with contextlib.suppress(OSError):  # the client hangs up when it refuses
                if kind == "lie":
                    self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: "
                                     + bytes.fromhex(value) + b"\r\n\r\n" + BODY)
                    return
                step = int(value)
                self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: 100000000\r\n\r\n")
                ends = time.monotonic() + DRIP_SECONDS
                while time.monotonic() < ends:
                    self.wfile.write(b"x" * step)
                    self.wfile.flush()
                    time.sleep(0.02)

    with loopback_server(Handler) as httpd:
        yield base_url(httpd)


LIES = ["²", "١٢", "1_000", "+12", "-1", "0x10", "1e3", "", "1" * 30, "12, 12"]


@pytest.mark.parametrize("header", LIES)
def test_a_lying_content_length_is_refused(server: str, tmp_path: Path, header: str) -> None:
    raw = header.encode("latin-1") if header.isascii() or header == "²" else header.encode()
    with pytest.raises((BadContentLength, DownloadTooLarge)):
        fetch_verified(f"{server}/lie/x{raw.hex()}", tmp_path / "f",
                       hashlib.sha256(BODY).hexdigest(), timeout=10, max_bytes=1 << 20)
    assert list(tmp_path.iterdir()) == []


@given(header=st.text(max_size=40))
def test_only_ascii_digits_are_a_length(header: str) -> None:
    try:
        found = content_length("http://x", header, 10**6)
    except BadContentLength:
        assert not (header.isascii() and header.isdigit())
    except DownloadTooLarge:
        assert header.isascii() and header.isdigit()
        assert len(header) > 18 or int(header) > 10**6
    else:
        assert header.isascii() and header.isdigit() and found == int(header)


def test_a_dripping_server_is_cut_off_below_the_minimum_rate(server: str, tmp_path: Path) -> None:
    pace = Pace(deadline_s=60, min_rate=10_000, window_s=0.5)  # the drip: 50 bytes/s
    with pytest.raises(TooSlow, match="below the 10000 needed"):
        fetch_verified(f"{server}/drip/1", tmp_path / "f", "0" * 64, timeout=10,
                       max_bytes=1 << 30, pace=pace)
    assert list(tmp_path.iterdir()) == []


def test_a_steady_endless_server_is_cut_off_at_the_deadline(server: str, tmp_path: Path) -> None:
    pace = Pace(deadline_s=1.0, min_rate=1_000, window_s=0.5)  # the server: 100 kB/s
    with pytest.raises(TooSlow, match="took more than 1 s"):
        fetch_verified(f"{server}/drip/2048", tmp_path / "f", "0" * 64, timeout=10,
                       max_bytes=1 << 30, pace=pace)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("name", "value"), [
    (DEADLINE_ENV, "soon"), (MIN_RATE_ENV, "-5"), (WINDOW_ENV, "nan"), (DEADLINE_ENV, "inf")])
def test_a_bad_setting_is_one_line(name: str, value: str) -> None:
    with pytest.raises(WorkloadError, match=f"{name}='{value}' is not a number >= 0") as caught:
        pace_from_env({name: value})
    assert "\n" not in caught.value.one_line()


def test_the_defaults_read_an_hour_and_50_kb_per_s() -> None:
    assert pace_from_env({}) == Pace(deadline_s=3600.0, min_rate=50_000.0, window_s=30.0)


@pytest.mark.parametrize(("path", "env", "fragment"), [
    (f"lie/x{'²'.encode('latin-1').hex()}", {}, "Content-Length '²' is not a number"),
    ("drip/1", {MIN_RATE_ENV: "10000", WINDOW_ENV: "0.5"}, "below the 10000 needed"),
])
def test_the_command_line_says_it_in_one_line_with_exit_2(
    server: str, isolated_env: dict[str, str], path: str, env: dict[str, str], fragment: str
) -> None:
    run_env = {**isolated_env, **env, "WORKLOADS_CIFAR10_URL": f"{server}/{path}"}
    result = run_cli(["cifar10", "--data", "cifar10", "--epochs", "1", "--steps-per-epoch", "1"],
                     run_env)
    assert result.returncode == 2, result.stderr[-2000:]
    assert_one_line_error(result, "cifar10", "cannot download", fragment)


def test_the_settings_are_in_help() -> None:
    from workloads.cifar10.command import EPILOG as CIFAR10_HELP
    from workloads.cli import EPILOG as MAIN_HELP
    from workloads.style.command import EPILOG as STYLE_HELP

    for text in (CIFAR10_HELP, STYLE_HELP, MAIN_HELP):
        assert all(name in text for name in (DEADLINE_ENV, MIN_RATE_ENV, WINDOW_ENV)), text
