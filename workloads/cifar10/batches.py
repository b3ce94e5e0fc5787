"""One CIFAR-10 batch: a pickle read as a description of arrays, then checked to be CIFAR-10.

A batch file is a pickle, and a pickle is a program: its GLOBAL/REDUCE opcodes call
whatever it names and its BUILD opcodes hand any state to the object's
``__setstate__``. Allowing NumPy's own reconstruction functions is not enough:
``numpy.dtype.__setstate__`` lets a ``V1`` dtype gain a field at any offset, and
reading that field reads memory outside the array (or crashes the process).

So nothing the pickle writes reaches NumPy unchecked. Every global a batch may name
resolves to one of the small objects below: ``numpy.dtype(...)`` to a
:class:`_DtypeRequest`, ``_reconstruct(...)`` to an :class:`_ArrayRequest`, and a
BUILD on them only records a state after checking it is the plain state that
NumPy writes for a plain integer type. The array is then made by
``numpy.frombuffer`` from a dtype out of a fixed table, with its byte count
checked against its shape. Any other use of those globals (BUILD on a function,
REDUCE on ``numpy.ndarray``, a dtype with fields, names, a sub-array or metadata)
is refused.

What decodes is then checked against what CIFAR-10 is (uint8 rows of 3072
channel-planar bytes, one integer label in 0-9 per row, at most 10000 rows), so a
file that only looks like a batch never reaches training. Every failure is a
:class:`BadBatch` whose message is one printable line.

Before any of that, the stream's opcodes are walked (:mod:`workloads.pickle_walk`):
a memo index beyond the stream's own stores, MARKs nested past
:data:`PICKLE_LIMITS`, more opcodes or dict items than a real batch has by far, are
refused before the unpickler allocates anything for them. Decoding a batch of
``n`` bytes then costs time linear in ``n`` and memory of a few times ``n`` (the
bytes, the walk's copy of the largest argument, the rows, their HWC copy).
"""

from __future__ import annotations

import dataclasses
import io
import pickle
from typing import Any

import numpy as np

from workloads.errors import brief, clip, one_line
from workloads.pickle_walk import PickleLimits, UnsafePickle, check_pickle

ROW_BYTES = 3072  # 32 x 32 pixels x 3 channel planes
ROWS_MAX = 10_000  # every batch of the real archive holds exactly this many images
NUM_CLASSES = 10
MESSAGE_MAX = 120  # the batch's name and the fix go around it on one line
# A real batch has about 40000 opcodes as Python 2's cPickle wrote it, 90000 as Python 3
# writes it (10000 labels, 10000 memoised file names), MARKs nested 3 deep and one dict of
# 4 items. The walk takes about a microsecond an opcode: a second at most per batch.
PICKLE_LIMITS = PickleLimits(opcodes=1_000_000, depth=32, hashed_items=64)
# What a batch's calls may make, as a multiple of its own size (plus a megabyte for a small
# one): the real batch's calls make its pixel array once (1x); one written by Python 3 makes
# its bytes through _codecs.encode and then the array (2x). Past that, a memoised argument
# is being passed again and again.
PRODUCED_PER_BYTE = 4
PRODUCED_SLACK = 1 << 20

# The only dtypes a batch may ask for: the real archive uses u1 for the pixels, and
# labels written as an integer array (rather than a list) need one of the others.
_INTEGER_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name) for name in ("u1", "i1", "u2", "i2", "u4", "i4", "u8", "i8")
}
_BYTE_ORDERS = {"|", "<", ">", "="}


class BadBatch(ValueError):
    """The bytes are not a CIFAR-10 batch; the message is the problem, after the batch's name."""

    def __init__(self, problem: str) -> None:
        super().__init__(_one_printable_line(problem))


class RefusedPickle(BadBatch):
    """The pickle asks for something no CIFAR-10 batch uses: it may be an attack."""


def _one_printable_line(text: str) -> str:
    """Collapse whitespace, replace control characters (they come from the file) and cap length."""
    return one_line(text, limit=MESSAGE_MAX)


def _text(value: Any) -> str | None:
    """A pickled Python 2 ``str`` arrives as bytes (``encoding="bytes"``), a Python 3 one as str."""
    if isinstance(value, bytes):
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def _is_int(value: Any, *allowed: int) -> bool:
    """``value`` is an int (bools count: NumPy writes both) equal to one of ``allowed``."""
    return isinstance(value, int) and value in allowed


class _Global:
    """A global a batch may name: callable as NumPy's would be, with no state to change.

    The pickle's BUILD opcode calls ``__setstate__`` when there is one, and sets
    attributes otherwise; on a plain function that would let a file rewrite our own
    decoder's defaults for the rest of the process. Here it is refused.
    """

    __slots__ = ("_call", "_label")

    def __init__(self, label: str, call: Any) -> None:
        self._label = label
        self._call = call

    def __call__(self, *args: Any) -> Any:
        if self._call is None:
            raise RefusedPickle(f"calls {self._label}, which no CIFAR-10 batch does")
        return self._call(*args)

    def __setstate__(self, state: Any) -> None:
        raise RefusedPickle(f"tries to modify {self._label}, which no CIFAR-10 batch does")


class _DtypeRequest:
    """``numpy.dtype(name, align, copy)`` as a batch wrote it, before and after its BUILD."""

    __slots__ = ("built", "dtype")

    def __init__(self, dtype: np.dtype[Any]) -> None:
        self.dtype = dtype
        self.built = False

    def __setstate__(self, state: Any) -> None:
        """Accept only the state NumPy writes for a plain type: ``(3, order, None x3, -1, -1, 0)``.

        Version 4 adds a ninth item (metadata), accepted only as None. Anything in
        the sub-array, names or fields slots (what makes a ``V1`` read elsewhere),
        another size, or a second BUILD is refused.
        """
        if self.built:
            raise RefusedPickle("sets the state of a dtype twice, which no CIFAR-10 batch does")
        plain = (
            isinstance(state, tuple)
            and len(state) in (8, 9)
            and _is_int(state[0], 3 if len(state) == 8 else 4)
            and _text(state[1]) in _BYTE_ORDERS
            and state[2] is None
            and state[3] is None
            and state[4] is None
            and _is_int(state[5], -1, self.dtype.itemsize)
            and _is_int(state[6], -1, self.dtype.alignment)
            and _is_int(state[7], 0)
            and (len(state) == 8 or state[8] is None)
        )
        if not plain:
            raise RefusedPickle(
                f"redefines the dtype {self.dtype.str} (sub-array, names, fields or size), "
                "which would let it read memory outside its array"
            )
        order = _text(state[1])
        if order in ("<", ">") and self.dtype.itemsize > 1:
            self.dtype = self.dtype.newbyteorder("<" if order == "<" else ">")
        self.built = True


class _ArrayRequest:
    """``_reconstruct(ndarray, (0,), b"b")`` as a batch wrote it; its BUILD supplies the array."""

    __slots__ = ("array",)

    def __init__(self) -> None:
        self.array: np.ndarray | None = None

    def __setstate__(self, state: Any) -> None:
        """``(1, shape, dtype, is_fortran, raw)`` (or without the version): checked, then built.

        ``frombuffer`` reads exactly ``len(raw)`` bytes, and that length must be the
        shape's size times the dtype's, so the array can only hold the pickle's bytes.
        """
        if self.array is not None:
            raise RefusedPickle("sets an array's contents twice, which no CIFAR-10 batch does")
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise BadBatch("holds an array state that is not (version, shape, dtype, order, data)")
        if len(state) == 5:
            if not _is_int(state[0], 1):
                raise BadBatch(f"holds an array state of version {brief(state[0])}, not 1")
            state = state[1:]
        shape, dtype_request, fortran, raw = state
        if (
            not isinstance(shape, tuple)
            or not 1 <= len(shape) <= 2
            or not all(type(n) is int and 0 <= n <= ROWS_MAX * ROW_BYTES for n in shape)
        ):
            raise BadBatch(f"holds an array of shape {brief(shape)}, not one or two sizes")
        if not isinstance(dtype_request, _DtypeRequest) or not dtype_request.built:
            raise RefusedPickle("holds an array whose dtype is not a numpy.dtype with its state")
        if not _is_int(fortran, 0):
            raise BadBatch("holds a Fortran-ordered array; CIFAR-10 rows are C-ordered")
        if not isinstance(raw, bytes):
            raise RefusedPickle(f"holds array data of type {type(raw).__name__}, not bytes")
        dtype = dtype_request.dtype
        expected = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
        if len(raw) != expected:
            raise BadBatch(f"holds {len(raw)} bytes for an array of shape {shape} ({expected})")
        self.array = np.frombuffer(raw, dtype=dtype).reshape(shape)


def _dtype(name: Any, align: Any = False, copy: Any = True) -> _DtypeRequest:
    """``numpy.dtype`` for the pickle: only a name from the integer table, as NumPy writes it."""
    text = _text(name)
    if text not in _INTEGER_DTYPES:
        shown = text if text is not None else type(name).__name__
        raise RefusedPickle(
            f"asks for the dtype {shown}, which no CIFAR-10 batch uses (only integer types)"
        )
    if not _is_int(align, 0) or not _is_int(copy, 0, 1):
        raise RefusedPickle("asks for a dtype with alignment or copy flags no batch uses")
    return _DtypeRequest(_INTEGER_DTYPES[text])


_NDARRAY = _Global("numpy.ndarray", None)


def _reconstruct(subtype: Any, shape: Any, typecode: Any) -> _ArrayRequest:
    """NumPy's ``_reconstruct(ndarray, (0,), b"b")``: the empty array that BUILD then fills."""
    if subtype is not _NDARRAY:
        raise RefusedPickle("asks to reconstruct something other than a numpy.ndarray")
    if shape != (0,) or _text(typecode) != "b":
        raise RefusedPickle("calls numpy's _reconstruct with arguments NumPy never writes")
    return _ArrayRequest()


def _encode(text: Any, encoding: Any) -> bytes:
    """``_codecs.encode(text, "latin1")``: how Python 3's protocol 2 writes a bytes object."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise RefusedPickle("calls _codecs.encode other than as Python writes bytes")
    return text.encode("latin1")


# (module, name) -> what it loads as. The real archive (pickled by Python 2 with
# NumPy 1) names numpy.core.multiarray._reconstruct, numpy.ndarray and numpy.dtype;
# NumPy 2 writes numpy._core for the same function, and Python 3's protocol 2 writes
# byte strings through _codecs.encode (the tests' archives and archive_writer).
_ALLOWED: dict[tuple[str, str], _Global] = {
    ("numpy.core.multiarray", "_reconstruct"): _Global("numpy's _reconstruct", _reconstruct),
    ("numpy._core.multiarray", "_reconstruct"): _Global("numpy's _reconstruct", _reconstruct),
    ("numpy", "ndarray"): _NDARRAY,
    ("numpy", "dtype"): _Global("numpy.dtype", _dtype),
    ("_codecs", "encode"): _Global("_codecs.encode", _encode),
}


class BatchUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals a CIFAR-10 batch is made of."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise RefusedPickle(
                f"asks for {clip(module, 40)}.{clip(name, 40)}, which may run code"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise RefusedPickle("holds a persistent reference, which no CIFAR-10 batch does")


def unpickle_batch(raw: bytes) -> Any:
    """``pickle.loads(raw, encoding="bytes")`` through :class:`BatchUnpickler`, once walked.

    The walk (:func:`workloads.pickle_walk.check_pickle`) comes first, so a stream
    that would make the unpickler allocate beyond its size never reaches it. Any
    exception while reading is the file's doing (the input is untrusted), so all of
    them become one :class:`BadBatch`: truncated streams, stack underflows,
    a REDUCE on a tuple, a BUILD on a list.
    """
    limits = dataclasses.replace(
        PICKLE_LIMITS, produced_bytes=PRODUCED_PER_BYTE * len(raw) + PRODUCED_SLACK
    )
    try:
        check_pickle(raw, limits)
    except UnsafePickle as exc:
        raise RefusedPickle(str(exc)) from None
    try:
        return BatchUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except BadBatch:
        raise
    except Exception as exc:  # untrusted input: every failure is a bad batch
        raise BadBatch(
            f"is not a readable pickle ({clip(str(exc), 60) or type(exc).__name__})"
        ) from exc


def _array(value: Any, key: str) -> np.ndarray:
    if not isinstance(value, _ArrayRequest) or value.array is None:
        raise BadBatch(f"has a {key} entry that is not a numpy array")
    return value.array


def _labels(value: Any, rows: int) -> np.ndarray:
    """A list of ints (the real archive) or a 1-D integer array, ``rows`` long, each in 0-9."""
    if isinstance(value, list):
        for index, label in enumerate(value):
            if type(label) is not int:
                raise BadBatch(f"has a label of type {type(label).__name__} at index {index}")
        labels = value
    elif isinstance(value, _ArrayRequest) and value.array is not None:
        return _label_array(value.array, rows)  # checked as an array: never a list of ints
    else:
        raise BadBatch("has a labels entry that is neither a list nor an integer array")
    if len(labels) != rows:
        raise BadBatch(f"has {rows} images but {len(labels)} labels")
    for index, label in enumerate(labels):
        if not 0 <= label < NUM_CLASSES:
            raise BadBatch(f"has label {brief(label)} at index {index}, not 0-9")
    return np.asarray(labels, dtype=np.int32)


def _label_array(array: np.ndarray, rows: int) -> np.ndarray:
    """A 1-D integer label array: shape, then range, checked by NumPy before any copy.

    Why not ``tolist``: a 60 KB archive can hold a label array of millions of
    elements, and a list of them costs 28 bytes a Python int, 8 a slot.
    """
    if array.ndim != 1:
        raise BadBatch(f"has labels of shape {brief(array.shape)}, not a list")
    if array.shape[0] != rows:
        raise BadBatch(f"has {rows} images but {array.shape[0]} labels")
    outside = np.flatnonzero((array < 0) | (array >= NUM_CLASSES))
    if outside.size:
        index = int(outside[0])
        raise BadBatch(f"has label {brief(int(array[index]))} at index {index}, not 0-9")
    return array.astype(np.int32)


def validate_batch(batch: Any) -> tuple[np.ndarray, np.ndarray]:
    """The unpickled dict -> (N, 3072) uint8 rows and N int32 labels, or :class:`BadBatch`."""
    if not isinstance(batch, dict):
        raise BadBatch(f"holds a {type(batch).__name__}, not a dict")
    for key in (b"data", b"labels"):
        if key not in batch:
            raise BadBatch(f"has no {key.decode()} entry")
    data = _array(batch[b"data"], "data")
    if data.dtype != np.uint8 or data.dtype.names is not None or data.dtype.itemsize != 1:
        raise BadBatch(f"has data of dtype {data.dtype}, not uint8")
    if data.ndim != 2 or data.shape[1] != ROW_BYTES:
        raise BadBatch(f"has data of shape {data.shape}, not (images, {ROW_BYTES})")
    rows = data.shape[0]
    if not 1 <= rows <= ROWS_MAX:
        raise BadBatch(f"has {rows} images; a CIFAR-10 batch has 1 to {ROWS_MAX}")
    if not data.flags.c_contiguous:
        raise BadBatch("has data that is not C-contiguous")
    return data, _labels(batch[b"labels"], rows)


def decode_batch(raw: bytes) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch -> (N, 32, 32, 3) uint8 HWC images and N int32 labels in 0-9.

    Raises :class:`BadBatch` (a ValueError) for anything that is not a CIFAR-10 batch.
    """
    data, labels = validate_batch(unpickle_batch(raw))
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)  # planar RGB -> HWC
    return np.ascontiguousarray(images), labels
