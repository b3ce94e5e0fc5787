"""Verified downloads: a file appears at its destination only once its checksum matches.

Why one module: the CIFAR-10 archive and the VGG19 weights are fetched the same way
(temp file beside the target, size cap, checksum, atomic rename), and a half-written or
wrong file in the cache must never be mistaken for a good one. This module raises the low-level
errors; each caller words the one-line message its users need (which mirror variable,
which file to copy where).

SHA-256 is the default: MD5 collides, so it only tells a truncated file from a good one,
never a crafted file from a good one. MD5 stays available for the VGG19 weights, whose
publisher (Keras) gives no other digest.

What a server says is untrusted too, so a download is bounded in size, time and rate:

* ``Content-Length`` must be ASCII digits (``str.isdigit`` also takes ``²``, which
  ``int`` then refuses; ``int`` also takes ``1_000`` and spaces): anything else is
  refused, and a length over the caller's cap is refused before the body is read;
* the whole transfer (connect, status line, headers and body) must end within
  :data:`DEADLINE_ENV` seconds (default :data:`DEADLINE_S`): every read and write of
  the socket waits at most what is left of it (:class:`_DeadlineSocket`), so a
  server that drips its headers a byte at a time is cut off too;
* every :data:`WINDOW_ENV` seconds (default :data:`WINDOW_S`) the body must have
  come at :data:`MIN_RATE_ENV` bytes per second on average (default
  :data:`MIN_RATE`): a server that drips a byte at a time, each within the socket's
  timeout, is cut off instead of read for ever. The body is read with ``read1``
  (what one ``recv`` returned), so the checks run after every packet;
* only ``http`` and ``https`` are spoken, and a redirect to any other scheme is
  refused: urllib's own opener would follow a redirect to ``ftp``, whose control
  connection keeps none of these bounds;
* whatever ``http.client`` raises on a malformed response (a bad status line, too
  many or too long headers, a bad chunk size, ``ValueError`` included) becomes one
  :class:`BadResponse`, an ``OSError`` whose message is one line.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from workloads import safefs
from workloads.bounded import digest_file
from workloads.errors import WorkloadError, brief, clip

CHUNK = 1 << 20
DEADLINE_ENV = "WORKLOADS_DOWNLOAD_DEADLINE_S"
MIN_RATE_ENV = "WORKLOADS_DOWNLOAD_MIN_RATE"
WINDOW_ENV = "WORKLOADS_DOWNLOAD_RATE_WINDOW_S"
DEADLINE_S = 3600.0  # the 170 MB CIFAR-10 archive at the minimum rate: under an hour
MIN_RATE = 50_000.0  # bytes per second; slower than that, 170 MB would take a day
WINDOW_S = 30.0  # the rate is averaged over this long (TCP's slow start included)
LENGTH_DIGITS_MAX = 18  # a Content-Length longer than this is over any cap anyway
Algorithm = Literal["sha256", "md5"]
LABELS: dict[str, str] = {"sha256": "SHA-256", "md5": "MD5"}


class ChecksumMismatch(Exception):
    """The downloaded bytes are not the expected file (truncated, or another file)."""

    def __init__(self, url: str, actual: str, expected: str, algorithm: Algorithm) -> None:
        super().__init__(f"{url} has {LABELS[algorithm]} {actual}, expected {expected}")
        self.url = url
        self.actual = actual
        self.expected = expected
        self.algorithm = algorithm


class IncompleteDownload(OSError):
    """The server closed the connection before sending the length it announced.

    An OSError, so callers treat it like any other failed transfer (retry, or copy
    the file by hand) rather than as a wrong file.
    """

    def __init__(self, url: str, received: int, expected: int) -> None:
        super().__init__(f"the transfer stopped after {received} of {expected} bytes")
        self.url = url
        self.received = received
        self.expected = expected


class BadContentLength(OSError):
    """The server's Content-Length is not a plain decimal number: the response is refused."""

    def __init__(self, url: str, header: str) -> None:
        super().__init__(f"the server's Content-Length {brief(header, 30)} is not a number")
        self.url = url


class TooSlow(OSError):
    """The transfer ran past its deadline or below its minimum rate: it is cut off.

    An OSError like a timed-out socket, so each caller reports it as a failed download.
    """


@dataclass(frozen=True)
class Pace:
    """How long a transfer may take: in all, and at the least rate over each window."""

    deadline_s: float = DEADLINE_S
    min_rate: float = MIN_RATE
    window_s: float = WINDOW_S


def pace_from_env(environ: Any = None) -> Pace:
    """The :class:`Pace` the environment sets (see the module), each with its default."""
    environ = os.environ if environ is None else environ
    values = []
    for name, default in ((DEADLINE_ENV, DEADLINE_S), (MIN_RATE_ENV, MIN_RATE),
                          (WINDOW_ENV, WINDOW_S)):
        text = environ.get(name)
        try:
            value = default if text in (None, "") else float(text)
        except ValueError:
            value = -1.0
        if not value >= 0 or value == float("inf"):
            raise WorkloadError(f"{name}={brief(text, 20)} is not a number >= 0",
                                f"set it to e.g. {default:g}, or unset it for that default")
        values.append(value)
    return Pace(*values)


class DownloadTooLarge(OSError):
    """The server announced or sent more than the caller's cap: it is not the expected file.

    Each caller sets the cap at a generous multiple of the real file, so only a wrong
    URL, a broken mirror or a hostile server meets it; the transfer stops there rather
    than filling the cache's disk. An OSError, so a caller without its own wording
    still reports it as a failed download.
    """

    def __init__(self, url: str, size: int, limit: int, *, announced: bool) -> None:
        what = f"announces {brief(size)} bytes" if announced else "sent more"
        super().__init__(f"{what}, over the {limit}-byte cap")
        self.url = url
        self.size = size
        self.limit = limit
        self.announced = announced


DIGEST_MAX_BYTES = 4 << 30  # the largest file hashed here (CIFAR-10, VGG19) is under 600 MB


def file_digest(path: Path, algorithm: Algorithm, limit: int = DIGEST_MAX_BYTES) -> str:
    """Hex digest of a regular file, read in chunks through :mod:`workloads.bounded`.

    Raises ``OSError`` when the file cannot be read (an I/O error mid-way included)
    and :class:`workloads.bounded.BadInput` for a link, a FIFO or a file over ``limit``.
    """
    return digest_file(path, algorithm, limit)


def stream_digest(fh: BinaryIO, algorithm: Algorithm) -> str:
    """Hex digest of what is left to read in ``fh``, in chunks (the file just written)."""
    digest = hashlib.new(algorithm, usedforsecurity=algorithm != "md5")
    for chunk in iter(lambda: fh.read(CHUNK), b""):
        digest.update(chunk)
    return digest.hexdigest()


class BadResponse(OSError):
    """The server's response is not HTTP that ``http.client`` can read; one line."""


class _DeadlineSocket:
    """A socket whose every read and write waits at most what is left of a deadline.

    ``http.client`` reads the status line and each header with ``readline``, and a
    socket timeout bounds only one ``recv``: a server sending a byte a second keeps
    it reading for ever. Here each ``recv_into`` and ``sendall`` first sets the
    socket's timeout to the smaller of the per-operation ``timeout`` and the time
    left, and past the deadline raises :class:`TooSlow`.
    """

    def __init__(self, sock: Any, deadline: float, timeout: float, limit_s: float) -> None:
        self._sock = sock
        self._deadline = deadline
        self._timeout = timeout
        self._limit_s = limit_s

    def _arm(self) -> None:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TooSlow(f"the transfer took more than {self._limit_s:g} s; see {DEADLINE_ENV}")
        self._sock.settimeout(min(self._timeout, left))

    def recv_into(self, buffer: Any, nbytes: int = 0) -> int:
        self._arm()
        try:
            return int(self._sock.recv_into(buffer, nbytes))
        except TimeoutError:
            self._arm()  # past the deadline: TooSlow; else the socket's own timeout
            raise

    def sendall(self, data: bytes) -> None:
        self._arm()
        self._sock.sendall(data)

    def makefile(self, mode: str = "rb", buffering: int = -1, **_: Any) -> Any:
        """A reader over this wrapper, counted as the real socket counts its own files.

        ``http.client`` closes the connection's socket while the response still
        reads from its file; like ``socket.makefile``, the socket stays open until
        that file is closed too.
        """
        self._sock._io_refs += 1
        return io.BufferedReader(socket.SocketIO(self, "rb"))  # type: ignore[arg-type]

    def _decref_socketios(self) -> None:
        self._sock._decref_socketios()

    def close(self) -> None:
        self._sock.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _deadline_connection(base: type[http.client.HTTPConnection], deadline: float,
                         limit_s: float) -> Any:
    """``base`` whose socket, once connected (and wrapped in TLS), keeps the deadline."""

    class Connection(base):  # type: ignore[valid-type, misc]
        def connect(self) -> None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TooSlow(f"the transfer took more than {limit_s:g} s; see {DEADLINE_ENV}")
            given: Any = getattr(self, "timeout", None)  # urllib's default: a sentinel
            timeout = min(given, left) if isinstance(given, int | float) and given > 0 else left
            self.timeout = timeout
            super().connect()
            self.sock: Any = _DeadlineSocket(self.sock, deadline, timeout, limit_s)

    return Connection


class _HttpOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, to ``http`` and ``https`` only.

    urllib follows a redirect to ``ftp`` as well, and its FTP handler's control
    connection keeps none of the deadline: a server that drips its greeting holds the
    download for ever, and an endless multi-line greeting is joined into one string
    by ``ftplib`` (gigabytes). A redirect elsewhere is refused as an ``HTTPError``.
    """

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Any:
        scheme = urllib.parse.urlsplit(newurl).scheme.lower()
        if scheme not in ("http", "https"):
            raise urllib.error.HTTPError(
                req.full_url, code, f"a redirect to {clip(scheme, 20) or 'no'} scheme is "
                "refused (http and https only)", headers, fp)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(deadline: float, limit_s: float) -> urllib.request.OpenerDirector:
    """An opener of HTTP and HTTPS only, whose connections keep ``deadline``.

    Built handler by handler, not by ``build_opener``, which adds the FTP, file and
    data handlers: only a scheme whose every read this module bounds is spoken, and a
    redirect to any other is refused (:class:`_HttpOnlyRedirects`).
    """
    plain = _deadline_connection(http.client.HTTPConnection, deadline, limit_s)
    tls = _deadline_connection(http.client.HTTPSConnection, deadline, limit_s)

    class PlainHandler(urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(plain, req)

    class TlsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: Any) -> Any:
            return self.do_open(tls, req, context=self._context)  # type: ignore[attr-defined]

    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(),
                    urllib.request.HTTPDefaultErrorHandler(), _HttpOnlyRedirects(),
                    urllib.request.HTTPErrorProcessor(), PlainHandler(), TlsHandler()):
        opener.add_handler(handler)
    return opener


def sha256sum(path: Path) -> str:
    """SHA-256 of a file: what every new checksum in this project uses."""
    return file_digest(path, "sha256")


def md5sum(path: Path) -> str:
    """MD5 of a file: only for files whose publisher gives nothing stronger (VGG19)."""
    return file_digest(path, "md5")


def fetch_verified(
    url: str,
    dest: Path,
    expected: str,
    *,
    timeout: float,
    max_bytes: int,
    algorithm: Algorithm = "sha256",
    pace: Pace | None = None,
) -> Path:
    """Download ``url`` to ``dest`` through a temp file in the same folder.

    At most ``max_bytes`` are accepted: a larger Content-Length is refused before
    the body is read, and a body that runs past the cap (no Content-Length, or
    chunked) is cut one byte after it. ``timeout`` bounds each connect and read;
    ``pace`` (default: :func:`pace_from_env`) the whole transfer. Raises
    ``urllib.error.URLError`` or ``OSError`` (``IncompleteDownload`` for a
    connection that closed early, ``DownloadTooLarge`` over the cap,
    ``BadContentLength``, ``TooSlow``) when the transfer or the cache folder fails,
    ``ChecksumMismatch`` when the bytes are wrong. In every failure the temp file
    is removed and ``dest`` is left as it was.
    """
    pace = pace_from_env() if pace is None else pace
    started = time.monotonic()
    # The cache folder is made one component at a time and checked, the bytes go to a new
    # temporary file beside ``dest`` and are renamed over it only once they are right
    # (safefs.writing: never through a link planted at ``dest`` or on the way to it).
    opener = _opener(started + pace.deadline_s, pace.deadline_s)
    with safefs.writing(dest) as out:
        try:
            with opener.open(url, timeout=timeout) as response:
                announced = content_length(url, response.headers.get("Content-Length"), max_bytes)
                received = _copy_capped(response, out, max_bytes, pace, started)
                if received > max_bytes:
                    raise DownloadTooLarge(url, received, max_bytes, announced=False)
        except (http.client.HTTPException, ValueError) as exc:
            raise BadResponse(_bad_response(exc)) from None
        if announced is not None and received != announced:
            raise IncompleteDownload(url, received, announced)
        out.flush()
        out.seek(0)
        actual = stream_digest(out, algorithm)
        if actual != expected.lower():
            raise ChecksumMismatch(url, actual, expected, algorithm)
    return dest


def _bad_response(exc: Exception) -> str:
    """One line for what ``http.client`` raised: its kind, and a little of its text."""
    kinds = {
        "BadStatusLine": "a status line that is not HTTP",
        "RemoteDisconnected": "no response (the connection closed)",
        "LineTooLong": "a header or status line longer than http.client accepts",
        "IncompleteRead": "a body that ended early",
        "ValueError": "a chunk size that is not a number",
    }
    name = type(exc).__name__
    what = kinds.get(name) or f"a response http.client refuses ({clip(str(exc), 40) or name})"
    return f"the server sent {what}"


def content_length(url: str, header: str | None, max_bytes: int) -> int | None:
    """The announced length: ASCII digits only, at most ``max_bytes``; None when absent."""
    if header is None:
        return None
    if not (header.isascii() and header.isdigit()):
        raise BadContentLength(url, header)
    if len(header) > LENGTH_DIGITS_MAX:  # no int() of a number that long: it is over any cap
        raise DownloadTooLarge(url, 10**LENGTH_DIGITS_MAX, max_bytes, announced=True)
    announced = int(header)
    if announced > max_bytes:
        raise DownloadTooLarge(url, announced, max_bytes, announced=True)
    return announced


def _copy_capped(source: Any, out: BinaryIO, max_bytes: int, pace: Pace, started: float) -> int:
    """Copy at most ``max_bytes + 1`` bytes (one past the cap shows the body is too long).

    ``read1`` returns what one read of the socket gave, so the pace is checked after
    every packet, not after a megabyte that a dripping server never completes.
    """
    received = 0
    checkpoint, at_checkpoint = started, 0
    while received <= max_bytes:
        chunk = source.read1(min(CHUNK, max_bytes + 1 - received))
        if not chunk:
            break
        out.write(chunk)
        received += len(chunk)
        now = time.monotonic()
        if now - started > pace.deadline_s:
            raise TooSlow(f"the transfer took more than {pace.deadline_s:g} s "
                          f"({received} bytes received); see {DEADLINE_ENV}")
        if now - checkpoint >= pace.window_s:
            rate = (received - at_checkpoint) / (now - checkpoint)
            if rate < pace.min_rate:
                raise TooSlow(f"the transfer ran at {rate:.0f} bytes/s over {now - checkpoint:.0f}"
                              f" s, below the {pace.min_rate:g} needed; see {MIN_RATE_ENV}")
            checkpoint, at_checkpoint = now, received
    return received
