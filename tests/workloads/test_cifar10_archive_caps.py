"""The CIFAR-10 archive as a whole: every batch checked, memory and downloads bounded.

An archive that passes its (overridden) checksum but is not CIFAR-10 is refused in
one line naming the batch, before training; a tar.gz that asks for more memory than
the real one needs is refused before the memory is taken; a download larger than
the cap is cut. The memory tests load the archive in a child process whose address
space is capped, so a reader that trusts a header fails there (MemoryError) instead
of taking a gigabyte from the machine running the suite.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import io
import pickle
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.loopback_http import base_url, loopback_server
from tests.workloads.cifar_fixture import (
    batch_members,
    batch_pickle,
    planar_batch,
    write_archive_with_label_10,
    write_members,
)
from tests.workloads.conftest import REPO, assert_one_line_error, run_cli
from workloads.cifar10 import archive_reader, data
from workloads.errors import WorkloadError

MEMBERS = batch_members()  # built once: the fixture's pixels are computed in Python
BATCH_1 = "cifar-10-batches-py/data_batch_1"
BATCH_3 = "cifar-10-batches-py/data_batch_3"
GIB = 1 << 30


def _refusal(path: Path) -> str:
    """load_archive's one-line refusal of ``path`` (the test fails if it loads)."""
    with pytest.raises(WorkloadError) as caught:
        data.load_archive(path)
    line = caught.value.one_line()
    assert "\n" not in line
    return line


# --- what decodes must be CIFAR-10, batch by batch ---------------------------------------


def _members_with(name: str, batch: bytes) -> dict[str, bytes]:
    return {**MEMBERS, name: batch}


def test_labels_outside_0_9_are_refused_before_training_and_no_record_is_written(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    """The checksum is overridden, as for a mirror: the content itself is checked."""
    archive = tmp_path / "data" / data.ARCHIVE_NAME
    env = {**isolated_env, "WORKLOADS_CIFAR10_SHA256": write_archive_with_label_10(archive)}
    out = tmp_path / "out.json"
    args = ["--data", "cifar10", "--data-dir", str(archive.parent), "--output", str(out)]
    result = run_cli(
        ["cifar10", *args, "--epochs", "1", "--steps-per-epoch", "1", "--batch-size", "4"], env
    )
    assert result.returncode == 2
    assert_one_line_error(
        result, "cifar10", "data_batch_3 has label 10 at index 5, not 0-9",
        "download it again",
    )  # fmt: skip
    assert not out.exists()
    results = Path(isolated_env["WORKLOADS_RESULTS"])
    assert not results.exists() or not [p for p in results.rglob("*") if p.is_file()]


def _wrong(kind: str, rows: int = 8) -> bytes:
    """One batch that is wrong in one way, else like the fixture's."""
    pixels, labels = planar_batch(0, rows)
    if kind == "label -1":
        labels[0] = -1
    elif kind == "one label short":
        labels = labels[:-1]
    elif kind == "row of 3071":
        pixels = pixels[:, :3071]
    elif kind == "int8 pixels":
        return batch_pickle(pixels.astype(np.int8), labels, b"x")
    elif kind == "labels as text":
        return pickle.dumps({b"data": pixels, b"labels": [str(v) for v in labels]}, protocol=2)
    elif kind == "no data":
        return pickle.dumps({b"labels": labels}, protocol=2)
    return batch_pickle(pixels, labels, b"x")


WRONG = {
    "label -1": "has label -1 at index 0",
    "one label short": "has 8 images but 7 labels",
    "row of 3071": "has data of shape (8, 3071), not (images, 3072)",
    "int8 pixels": "has data of dtype int8, not uint8",
    "labels as text": "has a label of type str at index 0",
    "no data": "has no data entry",
}


@settings(max_examples=24)
@given(
    kind=st.sampled_from(sorted(WRONG)),
    batch=st.sampled_from([*data.TRAIN_MEMBERS, data.TEST_MEMBER]),
)
def test_every_batch_is_checked_and_the_line_names_it(kind: str, batch: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / data.ARCHIVE_NAME
        write_members(path, _members_with(batch, _wrong(kind)))
        line = _refusal(path)
    assert f"is refused: {Path(batch).name} {WRONG[kind]}" in line, line
    assert "download it again" in line


# --- bounded reading of the tar.gz ---------------------------------------------------------

ZEROS_MIB = gzip.compress(bytes(1 << 20), compresslevel=9)  # ~1 KiB: one gzip member


def _header(info: tarfile.TarInfo, fmt: Literal[0, 1, 2] = tarfile.GNU_FORMAT) -> bytes:
    return info.tobuf(format=fmt, encoding="utf-8", errors="surrogateescape")


def _bomb(path: Path, header: bytes, zero_mib: int, instead_of: str = "") -> Path:
    """``header`` then ``zero_mib`` MiB of real zeros, then the valid members (but
    ``instead_of``, so the bomb is the only one of that name): gzip members concatenated,
    so a gigabyte of content costs a megabyte of file and no time to write."""
    tail = io.BytesIO()
    with tarfile.open(fileobj=tail, mode="w") as tar:
        for name, payload in MEMBERS.items():
            if name == instead_of:
                continue
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    path.write_bytes(gzip.compress(header) + ZEROS_MIB * zero_mib + gzip.compress(tail.getvalue()))
    return path


CAPPED_CHILD = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from workloads.cifar10 import data
    from workloads.errors import WorkloadError
    with open("/proc/self/status") as status:
        vm = next(int(l.split()[1]) * 1024 for l in status if l.startswith("VmSize:"))
    limit = vm + (256 << 20)  # what is mapped now, and 256 MiB more
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    try:
        data.load_archive(Path(sys.argv[2]))
    except WorkloadError as exc:
        print(exc.one_line())
        sys.exit(2)
    print("loaded")
    """
)


def _load_with_capped_memory(path: Path) -> str:
    """load_archive(path) in a child that may map only 256 MiB more than after its imports."""
    result = subprocess.run(
        [sys.executable, "-c", CAPPED_CHILD, str(REPO), str(path)],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 2, f"exit {result.returncode}: {result.stderr[-1500:]}"
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return lines[0]


def test_a_member_declaring_a_gigabyte_is_refused_before_it_is_read(tmp_path: Path) -> None:
    info = tarfile.TarInfo(BATCH_1)
    info.size = GIB
    path = _bomb(tmp_path / "a.tar.gz", _header(info), 1024, instead_of=BATCH_1)
    line = _load_with_capped_memory(path)
    assert f"declares '{BATCH_1}' as {GIB} bytes" in line


def test_a_pax_header_declaring_a_gigabyte_is_refused_before_it_is_read(tmp_path: Path) -> None:
    """tarfile reads a pax header's whole content into memory before returning the member."""
    info = tarfile.TarInfo("././@PaxHeader")
    info.type = tarfile.XHDTYPE
    info.size = GIB
    line = _load_with_capped_memory(_bomb(tmp_path / "p.tar.gz", _header(info), 1024))
    assert f"'././@PaxHeader' as {GIB} bytes" in line


def test_a_size_set_by_a_pax_record_is_checked_too(tmp_path: Path) -> None:
    """Sizes over 8 GiB go into a pax record; the ustar header under it says 0.

    A ``size`` record would move where the next header starts, so the header scan
    refuses it outright rather than follow tarfile's reading of it.
    """
    info = tarfile.TarInfo(BATCH_1)
    info.size = 16 * GIB
    header = _header(info, tarfile.PAX_FORMAT)
    line = _load_with_capped_memory(_bomb(tmp_path / "x.tar.gz", header, 512))
    assert "has a pax record 'size'" in line


def test_an_archive_that_unpacks_past_the_cap_is_cut(tmp_path: Path) -> None:
    """Members each under the cap, but 540 MiB in all: the stream is cut at 512 MiB."""
    parts = []
    for index in range(9):
        info = tarfile.TarInfo(f"cifar-10-batches-py/extra_{index}")
        info.size = 60 << 20
        parts.append(gzip.compress(_header(info)) + ZEROS_MIB * 60)
    path = tmp_path / "long.tar.gz"
    path.write_bytes(b"".join(parts))
    line = _load_with_capped_memory(path)
    assert f"unpacks to more than {archive_reader.UNPACKED_MAX_BYTES} bytes" in line


def test_more_headers_than_the_cap_are_refused(tmp_path: Path) -> None:
    members = {f"cifar-10-batches-py/extra_{i}": b"x" for i in range(archive_reader.HEADERS_MAX)}
    path = tmp_path / data.ARCHIVE_NAME
    write_members(path, {**MEMBERS, **members})
    assert f"more than {archive_reader.HEADERS_MAX} tar headers" in _refusal(path)


def _tar_gz(path: Path, entries: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for info, payload in entries:
            tar.addfile(info, io.BytesIO(payload) if payload else None)
    return path


def _regular(name: str, payload: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(payload)
    return info, payload


def test_a_batch_twice_a_link_as_a_batch_or_a_missing_batch_is_refused(tmp_path: Path) -> None:
    valid = [_regular(name, payload) for name, payload in MEMBERS.items()]
    twice = _tar_gz(tmp_path / "twice.tar.gz", [*valid, _regular(BATCH_1, b"later")])
    assert f"holds {BATCH_1} twice" in _refusal(twice)
    link = tarfile.TarInfo(BATCH_1)
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    linked = _tar_gz(tmp_path / "link.tar.gz", [(link, b""), *valid[1:]])
    assert f"holds '{BATCH_1}' of tar type b'2'" in _refusal(linked)
    missing = _tar_gz(tmp_path / "missing.tar.gz", valid[:-2])  # no test batch, no meta
    assert "has no cifar-10-batches-py/test_batch" in _refusal(missing)


def _stream_with(crafted: bytes, position: int) -> bytes:
    """The valid members as an uncompressed tar stream, ``crafted`` inserted before member
    ``position`` (after the last one when it equals their count)."""
    stream = io.BytesIO()
    for index, (member, payload) in enumerate(MEMBERS.items()):
        if index == position:
            stream.write(crafted)
        stream.write(_header(_regular(member, payload)[0]))
        stream.write(payload + bytes(-len(payload) % 512))
    if position == len(MEMBERS):
        stream.write(crafted)
    stream.write(bytes(1024))
    return stream.getvalue()


@pytest.mark.timeout(60)
def test_a_negative_size_is_refused_not_followed_backwards(tmp_path: Path) -> None:
    """A base-256 size of -2**40 sent the old reader back to earlier headers, over and over."""
    info = tarfile.TarInfo("cifar-10-batches-py/readme.html")
    info.size = -(1 << 40)
    path = tmp_path / data.ARCHIVE_NAME
    path.write_bytes(gzip.compress(_stream_with(_header(info), 0)))
    assert f"as {-(1 << 40)} bytes, outside the 0 to" in _refusal(path)


TAR_TYPES = [
    tarfile.REGTYPE,
    tarfile.AREGTYPE,
    tarfile.DIRTYPE,
    tarfile.SYMTYPE,
    tarfile.LNKTYPE,
    tarfile.CHRTYPE,
    tarfile.BLKTYPE,
    tarfile.FIFOTYPE,
    tarfile.CONTTYPE,
    tarfile.GNUTYPE_SPARSE,
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.GNUTYPE_LONGNAME,
]
_MEMBER_CAP = archive_reader.MEMBER_MAX_BYTES
SIZES = [0, 700, _MEMBER_CAP, _MEMBER_CAP + 1, 8 * GIB - 1, 1 << 40, -1, -(1 << 40)]


@pytest.mark.timeout(120)  # the old reader looped on a negative size
@settings(max_examples=60)
@given(
    kind=st.sampled_from(TAR_TYPES),
    size=st.sampled_from(SIZES),
    name=st.sampled_from([BATCH_1, "cifar-10-batches-py/readme.html"]),
    position=st.integers(0, len(MEMBERS)),
)
def test_a_crafted_header_anywhere_is_refused_or_harmless(
    kind: bytes, size: int, name: str, position: int
) -> None:
    """One header of any type and size (negative and 2**40 in base-256) among the real ones:
    an out-of-range size or a type CIFAR-10 has not is refused by name; anything else
    loads or is refused in one line. Never read into memory: at most 4 KiB follows it."""
    import tempfile

    info = tarfile.TarInfo(name)
    info.type, info.size = kind, size
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "/etc/passwd"
    behind = min(max(size, 0), 4096)
    crafted = _header(info) + bytes(behind + -behind % 512)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / data.ARCHIVE_NAME
        path.write_bytes(gzip.compress(_stream_with(crafted, position), compresslevel=1))
        try:
            data.load_archive(path)
            line = None
        except WorkloadError as exc:
            line = exc.one_line()
    extended = kind in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME)
    limit = archive_reader.EXTENDED_HEADER_MAX_BYTES if extended else _MEMBER_CAP
    if kind not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE) and not extended:
        assert line is not None and f"of tar type {kind!r}" in line, line
    elif not 0 <= size <= limit:
        assert line is not None and f"as {size} bytes, outside the 0 to {limit}" in line, line
    elif line is not None:
        assert "\n" not in line and str(path) in line


# --- bounded download of the archive -------------------------------------------------------


@pytest.fixture
def lying_mirror() -> Iterator[str]:
    """A mirror that announces a terabyte for the archive and sends a few bytes."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 40))
            self.end_headers()
            with contextlib.suppress(OSError):  # the client hangs up first, as it should
                self.wfile.write(b"\x1f\x8b" + bytes(4096))

    with loopback_server(Handler) as httpd:
        yield f"{base_url(httpd)}/{data.ARCHIVE_NAME}"


def test_a_mirror_announcing_more_than_the_cap_is_refused_before_reading(
    lying_mirror: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKLOADS_CIFAR10_URL", lying_mirror)
    with pytest.raises(WorkloadError) as caught:
        data.locate_archive(None)
    line = caught.value.one_line()
    assert f"announces {1 << 40} bytes, over the {data.ARCHIVE_MAX_BYTES}-byte cap" in line
    assert "check WORKLOADS_CIFAR10_URL" in line
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_file_in_data_dir_over_the_cap_is_refused_before_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / data.ARCHIVE_NAME
    with big.open("wb") as fh:
        fh.truncate(data.ARCHIVE_MAX_BYTES + 1)  # sparse: no disk used
    monkeypatch.setenv("WORKLOADS_CIFAR10_SHA256", "0" * 64)
    with pytest.raises(WorkloadError, match=f"is {data.ARCHIVE_MAX_BYTES + 1} bytes, over the"):
        data.locate_archive(tmp_path)
