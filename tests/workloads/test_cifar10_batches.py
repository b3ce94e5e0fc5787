"""One CIFAR-10 batch against the family of pickles an attacker can write.

A batch decodes to the expected arrays or is refused with one printable line
(``ValueError``): never a crash, an out-of-bounds read, or a batch that is not
CIFAR-10 passed on to training. The families are drawn by Hypothesis under the
suite's derandomised profile, with bounded example counts.
"""

from __future__ import annotations

import pickle
import pickletools
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.workloads.cifar_fixture import batch_pickle, planar_batch, python2_batch
from tests.workloads.conftest import REPO
from workloads.cifar10 import data

PLAIN_U1_STATE = (3, "|", None, None, None, -1, -1, 0)


class _Dtype:
    """Pickles as ``numpy.dtype(name, False, True)`` followed by BUILD with ``state``."""

    def __init__(self, name: Any, state: Any) -> None:
        self.name, self.state = name, state

    def __reduce__(self) -> Any:
        return (np.dtype, (self.name, False, True), self.state)


class _Array:
    """Pickles as NumPy does an array: ``_reconstruct`` then BUILD with ``(1, shape, ...)``."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, raw: bytes, fortran: Any = False):
        self.shape, self.dtype, self.raw, self.fortran = shape, dtype, raw, fortran

    def __reduce__(self) -> Any:
        from numpy._core.multiarray import _reconstruct

        state = (1, self.shape, self.dtype, self.fortran, self.raw)
        return (_reconstruct, (np.ndarray, (0,), b"b"), state)


def field_dtype(offset: int, name: str = "V1", itemsize: int = 1) -> _Dtype:
    """The reported attack: a one-byte dtype that gains a uint8 field at ``offset``."""
    fields = {"a": (np.dtype("u1"), offset)}
    return _Dtype(name, (3, "|", None, ("a",), fields, itemsize, 1, 0))


def batch_with(dtype: Any, rows: int = 1, labels: list[int] | None = None) -> bytes:
    """A batch of ``rows`` zero images whose data array is declared with ``dtype``."""
    raw = bytes(rows * 3072)
    array = _Array((rows, 3072), dtype, raw)
    return pickle.dumps({b"data": array, b"labels": labels or [0] * rows}, protocol=2)


def assert_decodes_or_refuses(raw: bytes) -> tuple[np.ndarray, np.ndarray] | None:
    """The property every input must meet: valid CIFAR-10 arrays, or one refusal line."""
    try:
        images, labels = data.decode_batch(raw)
    except ValueError as exc:
        line = str(exc)
        assert line and line.isprintable() and len(line) <= 200, repr(line)
        return None
    assert images.dtype == np.uint8 and images.shape[1:] == (32, 32, 3)
    assert labels.dtype == np.int32 and labels.shape == (len(images),)
    assert 1 <= len(images) <= 10_000
    assert ((labels >= 0) & (labels <= 9)).all()
    return images, labels


# --- the reported attack ----------------------------------------------------------------


def test_a_dtype_given_a_field_outside_its_item_by_build_is_refused() -> None:
    """V1 + BUILD(fields={'a': (u1, 30000)}): decoding read 30000 bytes past each row."""
    with pytest.raises(ValueError, match="dtype V1"):
        data.decode_batch(batch_with(field_dtype(30000)))


def test_a_uint8_dtype_redefined_by_build_is_refused() -> None:
    """The allowed name with a hostile state: the state itself is refused."""
    with pytest.raises(ValueError, match="redefines the dtype"):
        data.decode_batch(batch_with(field_dtype(30000, name="u1")))


CHILD = textwrap.dedent(
    """
    import pickle, sys
    sys.path.insert(0, sys.argv[1])
    from tests.workloads.test_cifar10_batches import batch_with, field_dtype
    from workloads.cifar10 import data
    for offset in (30000, 200000, 2**31 - 1, -(2**31), -4096):
        for name, itemsize in (("V1", 1), ("u1", 1), ("V8", 2**31 - 1)):
            try:
                images, _ = data.decode_batch(batch_with(field_dtype(offset, name, itemsize), 64))
            except ValueError:
                continue
            print(f"decoded {name} field at {offset}: {int(images.astype(int).sum())}")
    print("done")
    """
)


def test_far_fields_neither_crash_nor_decode_in_a_child_process() -> None:
    """The family that segfaulted (a field at 200000): run where a crash cannot end the suite."""
    result = subprocess.run(
        [sys.executable, "-c", CHILD, str(REPO)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    assert result.stdout.splitlines() == ["done"], result.stdout


# --- the family of dtypes a batch can ask for ---------------------------------------------

DTYPE_NAMES = ["u1", b"u1", "V1", "|V1", "V8", "i1", "f4", "O8", "S1", "U1", "b1", "M8[s]", 3]
STATE_ALTERNATIVES: list[list[Any]] = [
    [3, 4, 2, 0, -1, True],
    ["|", b"|", "<", ">", "=", "x", None],
    [None, (np.dtype("u1"), (2,)), ()],
    [None, ("a",), (), ("a", "b")],
    [None, {"a": (np.dtype("u1"), 0)}, {}, {"a": (np.dtype("u1"), 200000)}],
    [-1, 1, 0, 2, 30000, 2**31 - 1],
    [-1, 1, 0, 16],
    [0, 1, 16, -1],
]


@st.composite
def dtype_states(draw: st.DrawFn) -> tuple[Any, ...]:
    """The plain state with some of its items replaced (one to all of them)."""
    state: list[Any] = list(PLAIN_U1_STATE)
    for index in draw(st.sets(st.integers(0, 7), max_size=4)):
        state[index] = draw(st.sampled_from(STATE_ALTERNATIVES[index]))
    if draw(st.booleans()):
        state.append(draw(st.sampled_from([None, {}, {"k": 1}])))  # version 4's metadata
    return tuple(state)


def _is_plain_u1_state(state: tuple[Any, ...]) -> bool:
    version = 3 if len(state) == 8 else 4
    return (
        state[0] == version
        and (len(state) == 8 or state[8] is None)
        and state[1] in ("|", b"|", "<", ">", "=")
        and state[2:5] == (None, None, None)
        and state[5] in (-1, 1)
        and state[6] in (-1, 1)
        and state[7] == 0
    )


@settings(max_examples=150)
@given(name=st.sampled_from(DTYPE_NAMES), state=dtype_states(), build=st.booleans())
def test_only_a_plain_uint8_dtype_decodes(name: Any, state: tuple[Any, ...], build: bool) -> None:
    dtype = _Dtype(name, state) if build else _NoBuildDtype(name)
    decoded = assert_decodes_or_refuses(batch_with(dtype, rows=2))
    expected = build and name in ("u1", b"u1") and _is_plain_u1_state(state)
    assert (decoded is not None) == expected


class _NoBuildDtype:
    """``numpy.dtype(name)`` with no BUILD after it (NumPy always writes one)."""

    def __init__(self, name: Any) -> None:
        self.name = name

    def __reduce__(self) -> Any:
        return (np.dtype, (self.name, False, True))


# --- the family of batch contents --------------------------------------------------------

LABELS = st.one_of(st.integers(-3, 12), st.sampled_from([2**70, -(2**70), True, 1.0, b"1"]))


@settings(max_examples=150)
@given(
    rows=st.integers(0, 4),
    cols=st.sampled_from([3071, 3072, 3073]),
    dtype=st.sampled_from(["u1", "i1", "u2", "i8", "f4", "?", "V1"]),
    fortran=st.booleans(),
    labels=st.lists(LABELS, max_size=6),
    labels_as_array=st.booleans(),
)
def test_a_batch_decodes_exactly_when_it_is_cifar10(
    rows: int,
    cols: int,
    dtype: str,
    fortran: bool,
    labels: list[Any],
    labels_as_array: bool,
) -> None:
    """uint8 (N, 3072) C-ordered data with N integer labels in 0-9, 1 <= N <= 10000."""
    pixels = (np.arange(rows * cols) % 251).astype(np.uint8).reshape(rows, cols).astype(dtype)
    if fortran:
        pixels = np.asfortranarray(pixels)
    int_labels = all(type(v) is int and -(2**63) <= v < 2**63 for v in labels)
    value: Any = labels
    if labels_as_array and int_labels:
        value = np.asarray(labels, dtype=np.int64)
    raw = pickle.dumps({b"data": pixels, b"labels": value, b"batch_label": b"x"}, protocol=2)
    decoded = assert_decodes_or_refuses(raw)
    valid = (
        rows >= 1
        and cols == 3072
        and dtype == "u1"
        and not (fortran and rows > 1)
        and all(type(v) is int and 0 <= v <= 9 for v in labels)
        and len(labels) == rows
    )
    assert (decoded is not None) == valid
    if decoded is not None:
        images, decoded_labels = decoded
        planar = images.transpose(0, 3, 1, 2).reshape(rows, 3072)
        np.testing.assert_array_equal(planar, pixels)
        assert decoded_labels.tolist() == labels


def test_label_outside_0_9_is_named_with_its_index() -> None:
    pixels, _ = planar_batch(0, 3)
    with pytest.raises(ValueError, match=r"has label 12 at index 2, not 0-9"):
        data.decode_batch(batch_pickle(pixels, [1, 2, 12], b"x"))


def test_ten_thousand_rows_decode_and_one_more_is_refused() -> None:
    """The real batch size is the limit: a batch cannot make the decoder allocate more."""
    rows = np.zeros((10_000, 3072), dtype=np.uint8)
    images, labels = data.decode_batch(batch_pickle(rows, [9] * 10_000, b"x"))
    assert images.shape == (10_000, 32, 32, 3) and labels.shape == (10_000,)
    more = np.zeros((10_001, 3072), dtype=np.uint8)
    with pytest.raises(ValueError, match="has 10001 images; a CIFAR-10 batch has 1 to 10000"):
        data.decode_batch(batch_pickle(more, [9] * 10_001, b"x"))


def test_the_python2_layout_of_the_real_archive_decodes() -> None:
    """Byte strings as BINSTRING, dtype('u1', 0, 1), numpy.core: what the real file holds."""
    pixels = np.random.default_rng(0).integers(0, 256, (1001, 3072), dtype=np.uint8)
    labels = [n % 10 for n in range(1001)]  # more than one APPENDS run of 1000
    images, decoded = data.decode_batch(python2_batch(pixels, labels, b"training batch 1 of 5"))
    assert decoded.tolist() == labels
    np.testing.assert_array_equal(images.transpose(0, 3, 1, 2).reshape(1001, 3072), pixels)


# --- the family of opcode streams ----------------------------------------------------------


def _stripped(obj: Any) -> bytes:
    """``obj`` pickled with protocol 2, without PROTO and STOP: a snippet to splice in."""
    raw = pickle.dumps(obj, protocol=2)
    return raw[2:-1]


def _segments(raw: bytes) -> list[bytes]:
    """The stream cut at opcode boundaries, so mutations insert whole opcodes."""
    starts = [pos for _, _, pos in pickletools.genops(raw)]
    assert starts is not None
    return [raw[a:b] for a, b in zip(starts, [*starts[1:], len(raw)], strict=True)]


_PIXELS, _LABELS = planar_batch(0, 2)
BASES = [
    _segments(batch_pickle(_PIXELS, _LABELS, b"training batch 1 of 5")),
    _segments(python2_batch(_PIXELS, _LABELS, b"training batch 1 of 5")),
]
SNIPPETS = [
    # other globals, by GLOBAL and by STACK_GLOBAL
    b"cos\nsystem\n",
    b"cbuiltins\neval\n",
    b"cbuiltins\ngetattr\n",
    b"cnumpy\nfrombuffer\n",
    b"cnumpy.core.multiarray\nscalar\n",
    b"cnumpy\ndtype\n",
    b"cnumpy\nndarray\n",
    b"cnumpy._core.multiarray\n_reconstruct\n",
    b"c_codecs\nencode\n",
    b"X\x02\x00\x00\x00osX\x06\x00\x00\x00system\x93",
    b"X\x05\x00\x00\x00numpyX\x05\x00\x00\x00dtype\x93",
    # calls, builds and stack shuffles
    b"R",
    b"b",
    b"\x81",
    b"0",
    b"2",
    b"(",
    b"t",
    b")",
    b"\x85",
    b"\x86",
    b"\x87",
    b"}",
    b"]",
    b"s",
    b"u",
    b"a",
    b"e",
    b"N",
    b"\x88",
    b"\x89",
    b".",
    b"h\x00",
    b"h\x05",
    b"q\x05",
    b"\x94",
    b"K\xff",
    b"J\xff\xff\xff\x7f",
    b"U\x02u1",
    b"U\x02V1",
    b"X\x01\x00\x00\x00|",
    b"C\x03abc",
    b"Q",  # BINPERSID
    b"\x97",  # NEXT_BUFFER
    # BUILD with a dict state, and with a slot state that would set a function's defaults
    b"}X\x01\x00\x00\x00aK\x01sb",
    b"N}X\x0c\x00\x00\x00__defaults__)s\x86b",
    # whole hostile objects: dtypes with fields, far offsets, arrays with lying sizes
    _stripped(field_dtype(30000)),
    _stripped(field_dtype(30000, name="u1")),
    _stripped(_Dtype("u1", (3, "|", (np.dtype("u1"), (4096,)), None, None, -1, -1, 0))),
    _stripped(_Array((2, 3072), _Dtype("u1", PLAIN_U1_STATE), b"\x00" * 10)),
    _stripped(_Array((10**6, 3072), _Dtype("u1", PLAIN_U1_STATE), b"")),
    _stripped(_Array((2, 3072), _Dtype("i8", (3, "<", None, None, None, -1, -1, 0)), b"")),
]


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    """A real-layout batch with one to four opcode-level mutations."""
    segments = list(draw(st.sampled_from(BASES)))
    for _ in range(draw(st.integers(1, 4))):
        if not segments:
            break
        index = draw(st.integers(0, len(segments) - 1))
        kind = draw(st.sampled_from(["insert", "replace", "delete", "flip", "truncate"]))
        if kind in ("insert", "replace"):
            snippet = draw(st.sampled_from(SNIPPETS))
            segments[index : index + (kind == "replace")] = [snippet]
        elif kind == "delete" and len(segments) > 1:
            del segments[index]
        elif kind == "flip" and segments[index]:
            segment = bytearray(segments[index])
            at = draw(st.integers(0, min(len(segment), 16) - 1))
            segment[at] = draw(st.integers(0, 255))
            segments[index] = bytes(segment)
        elif kind == "truncate":
            segments = segments[:index]
    return b"".join(segments)


@settings(max_examples=400)
@given(raw=mutated_batches())
def test_any_mutated_stream_decodes_to_cifar10_or_is_refused_in_one_line(raw: bytes) -> None:
    assert_decodes_or_refuses(raw)


def test_the_decoder_is_unchanged_by_the_streams_it_refused() -> None:
    """A refused BUILD on an allowed global must not have altered it for the next batch."""
    for snippet in (b"cnumpy\ndtype\nN}X\x0c\x00\x00\x00__defaults__)s\x86b.",
                    b"c_codecs\nencode\n}X\x01\x00\x00\x00aK\x01sb."):  # fmt: skip
        with pytest.raises(ValueError, match="tries to modify"):
            data.decode_batch(b"\x80\x02" + snippet)
    images, labels = data.decode_batch(batch_pickle(_PIXELS, _LABELS, b"x"))
    assert images.shape == (2, 32, 32, 3) and labels.tolist() == _LABELS
