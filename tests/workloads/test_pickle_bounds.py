"""Decoding a pickle costs memory and time bounded by its size, whatever its opcodes say.

Python's C unpickler sizes its memo table from the index a ``LONG_BINPUT`` names,
so a 9-byte batch (``\\x80\\x02 N r <u32> .``) allocated 16 bytes per index before
anything refused it: 1 GiB for index 2**26, in a 132-byte archive. The opcodes are
now walked first (workloads/pickle_walk.py). These tests generate opcode streams
with Hypothesis (memo stores and fetches at any index, MARKs nested deep, dicts of
many items, truncations) and measure the peak of Python's allocator while each is
decoded (``tracemalloc`` sees the unpickler's memo too): a stream of a few hundred
bytes may never cost more than a few MiB. The sweep database goes through the same
walk, and the archive with the memo batches through ``workloads cifar10`` itself.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import pickle
import struct
import tarfile
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.workloads.conftest import assert_one_line_error, run_cli
from workloads.cifar10 import data
from workloads.cifar10.batches import BadBatch, decode_batch
from workloads.errors import WorkloadError
from workloads.pickle_walk import PickleLimits, UnsafePickle, check_pickle

PEAK_MAX = 4 << 20  # "a few MiB": what any of these small streams may cost to decode
MEMO_INDEX = 2**26  # the figure: 1 GiB of memo table before the fix


def memo_batch(index: int) -> bytes:
    """PROTO 2, NONE, LONG_BINPUT index, STOP: 9 bytes."""
    return b"\x80\x02N" + b"r" + struct.pack("<I", index) + b"."


def peak_while(call: Callable[[], Any]) -> tuple[int, Any]:
    """Peak bytes Python's allocators held above the start while ``call`` ran; its outcome."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start, _ = tracemalloc.get_traced_memory()
        try:
            outcome: Any = call()
        except Exception as exc:  # the outcome is judged by the caller
            outcome = exc
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - start, outcome


def test_the_memo_batch_is_refused_before_the_unpickler_allocates() -> None:
    peak, outcome = peak_while(lambda: decode_batch(memo_batch(MEMO_INDEX)))
    assert isinstance(outcome, BadBatch), outcome
    assert "memo index 67108864 with only 1 memo stores" in str(outcome)
    assert peak < PEAK_MAX, f"{peak / 2**20:.0f} MiB"


def memo_archive(path: Path, index: int) -> Path:
    """The 132-byte archive: every batch the 9-byte memo pickle, gzip at its best."""
    names = [*data.TRAIN_MEMBERS, data.TEST_MEMBER]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            payload = memo_batch(index)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(buffer.getvalue(), compresslevel=9, mtime=0))
    return path


def test_the_memo_archive_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    archive = memo_archive(tmp_path / data.ARCHIVE_NAME, MEMO_INDEX)
    assert len(archive.read_bytes()) < 200
    peak, outcome = peak_while(lambda: data.load_archive(archive))
    assert isinstance(outcome, WorkloadError), outcome
    assert "data_batch_1 uses memo index 67108864" in outcome.one_line()
    assert peak < PEAK_MAX, f"{peak / 2**20:.0f} MiB"


def test_the_memo_archive_on_the_command_line_is_one_line_and_exit_2(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    archive = memo_archive(tmp_path / "data" / data.ARCHIVE_NAME, 2**31 - 1)
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    result = run_cli(["cifar10", "--data", "cifar10", "--data-dir", str(archive.parent),
                      "--epochs", "1", "--steps-per-epoch", "1"],
                     {**isolated_env, "WORKLOADS_CIFAR10_SHA256": sha})
    assert result.returncode == 2, result.stderr[-2000:]
    assert_one_line_error(result, "cifar10", "uses memo index 2147483647")


def test_a_label_of_10_to_the_5000_is_one_line_and_exit_2(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    """Formatting it in full raised Python's 4300-digit ValueError: a traceback, exit 1."""
    from tests.workloads.cifar_fixture import batch_pickle, planar_batch

    pixels, labels = planar_batch(0, 2)
    labels[1] = 10**5000
    members = {name: batch_pickle(pixels, labels, b"b")
               for name in (*data.TRAIN_MEMBERS, data.TEST_MEMBER)}
    archive = tmp_path / "data" / data.ARCHIVE_NAME
    archive.parent.mkdir()
    with tarfile.open(archive, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    result = run_cli(["cifar10", "--data", "cifar10", "--data-dir", str(archive.parent),
                      "--epochs", "1", "--steps-per-epoch", "1"],
                     {**isolated_env, "WORKLOADS_CIFAR10_SHA256": sha})
    assert result.returncode == 2, result.stderr[-2000:]
    assert_one_line_error(result, "cifar10", "has label <an integer of 16610 bits> at index 1")


# --- Generated opcode streams -----------------------------------------------------------

def _u32(value: int) -> bytes:
    return struct.pack("<I", value)


# Memo indices across every scale up to 2**22 (64 MiB of memo table before the walk):
# Hypothesis alone favours small integers, which no unpickler over-allocates for.
INDEX = st.builds(lambda exponent, low: (1 << exponent) + low, st.integers(0, 22),
                  st.integers(0, 255))
OPCODE = st.one_of(  # a store follows a push (NONE), so the unpickler reaches the memo
    st.builds(lambda i: b"Nr" + _u32(i), INDEX),  # LONG_BINPUT
    st.builds(lambda i: b"Nq" + bytes([i]), st.integers(0, 255)),  # BINPUT
    st.builds(lambda i: b"j" + _u32(i), INDEX),  # LONG_BINGET
    st.builds(lambda i: b"h" + bytes([i]), st.integers(0, 255)),  # BINGET
    st.builds(lambda i: b"Np" + str(i).encode() + b"\n", INDEX),  # PUT
    st.just(b"\x94"),  # MEMOIZE
    st.just(b"("),  # MARK
    st.sampled_from([b"t", b"l", b"d", b"e", b"u", b"0", b"1", b"2", b"s", b"a", b"\x85",
                     b"\x86", b"\x87", b"]", b"}", b")", b"N", b"\x88", b"\x89", b"\x8f",
                     b"\x90", b"\x91"]),
    st.builds(lambda i: b"K" + bytes([i]), st.integers(0, 255)),  # BININT1
    st.builds(lambda i: b"J" + struct.pack("<i", i), st.integers(-(2**31), 2**31 - 1)),
    st.builds(lambda raw: b"C" + bytes([len(raw)]) + raw, st.binary(max_size=40)),
)


@st.composite
def opcode_streams(draw: st.DrawFn) -> bytes:
    body = b"".join(draw(st.lists(OPCODE, max_size=60)))
    end = draw(st.sampled_from([b".", b"N.", b"", b".junk"]))
    return b"\x80\x02" + body + end


@settings(max_examples=150, deadline=None)
@given(stream=opcode_streams())
@example(stream=memo_batch(2**22))
@example(stream=b"\x80\x02Np4194304\n.")
def test_any_generated_batch_decodes_or_is_refused_within_a_few_mib(stream: bytes) -> None:
    peak, outcome = peak_while(lambda: decode_batch(stream))
    if isinstance(outcome, Exception):
        assert isinstance(outcome, BadBatch), repr(outcome)
        assert "\n" not in str(outcome) and len(str(outcome)) <= 120
    assert peak < PEAK_MAX, f"{peak / 2**20:.1f} MiB for {len(stream)} bytes"


@settings(max_examples=100, deadline=None)
@given(stream=opcode_streams())
def test_what_the_walk_accepts_never_allocates_beyond_its_memo_stores(stream: bytes) -> None:
    """For any stream the walk lets through, the plain unpickler (no allow-list) stays small."""
    try:
        check_pickle(stream, PickleLimits(opcodes=10_000))
    except UnsafePickle as refusal:
        assert "\n" not in str(refusal)
        return
    peak, _ = peak_while(lambda: pickle.loads(stream))
    assert peak < PEAK_MAX, f"{peak / 2**20:.1f} MiB for {len(stream)} bytes"


@pytest.mark.parametrize(("stream", "refusal"), [
    (b"\x80\x02" + b"(" * 65 + b"N.", "nests more than 64 marks deep"),
    (b"\x80\x02}(" + b"K\x01K\x01" * 65 + b"u.", "more than 64 dict or set items"),
    (b"\x80\x02N" + b"0N" * 100 + b".", "more than 150 opcodes"),
    (b"\x80\x02Nh\x00.", "uses memo index 0 with only 0 memo stores"),
    (b"\x80\x02N.trailing", "has 8 bytes after its STOP opcode"),
    (b"\x80\x02N", "is not a readable pickle"),
    (b"\x80\x02NQ.", "holds a persistent ID"),
])
def test_each_limit_is_named(stream: bytes, refusal: str) -> None:
    with pytest.raises(UnsafePickle, match=refusal):
        check_pickle(stream, PickleLimits(opcodes=150, depth=64, hashed_items=64))


def test_a_real_batch_fits_the_batch_limits_with_room() -> None:
    """A 10000-row batch as Python pickles it: well inside what the walk allows."""
    import numpy as np

    from workloads.cifar10.batches import PICKLE_LIMITS

    rows = np.zeros((10_000, 3072), dtype=np.uint8)
    raw = pickle.dumps({b"batch_label": b"x", b"labels": [1] * 10_000, b"data": rows,
                        b"filenames": [f"{i}.png".encode() for i in range(10_000)]}, protocol=2)
    shape = check_pickle(raw, PICKLE_LIMITS)
    assert shape.opcodes * 4 < PICKLE_LIMITS.opcodes
    assert shape.hashed_items == 4 and shape.depth <= 4
