"""Build small archives in the exact format of cifar-10-python.tar.gz.

Pixel values are a known function of (image, channel, row, column), so a test
can check that decoding puts every byte where it belongs (channel-planar input
to HWC output), not just that shapes match.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import struct
import tarfile
from pathlib import Path

import numpy as np

TRAIN_PER_BATCH = 8
TEST_IMAGES = 8


def pixel(image: int, channel: int, row: int, col: int) -> int:
    return (image * 7 + channel * 50 + row * 3 + col) % 256


def planar_batch(first_image: int, count: int) -> tuple[np.ndarray, list[int]]:
    """Rows of 3072 bytes: 1024 R, then 1024 G, then 1024 B, each row-major."""
    data = np.zeros((count, 3072), dtype=np.uint8)
    for i in range(count):
        n = first_image + i
        for c in range(3):
            for r in range(32):
                for col in range(32):
                    data[i, c * 1024 + r * 32 + col] = pixel(n, c, r, col)
    labels = [(first_image + i) % 10 for i in range(count)]
    return data, labels


def batch_pickle(data: np.ndarray, labels: list[int], batch_label: bytes) -> bytes:
    """A batch as Python 3 pickles it (protocol 2), the way the tests' archives hold it."""
    return pickle.dumps(
        {
            b"batch_label": batch_label,
            b"labels": labels,
            b"data": data,
            b"filenames": [b"x.png"] * len(labels),
        },
        protocol=2,
    )


def batch_members(
    train_per_batch: int = TRAIN_PER_BATCH, test_images: int = TEST_IMAGES
) -> dict[str, bytes]:
    """Every member of the archive, by name: five training batches, the test batch, the meta."""
    members: dict[str, bytes] = {}
    for b in range(1, 6):
        data, labels = planar_batch((b - 1) * train_per_batch, train_per_batch)
        members[f"cifar-10-batches-py/data_batch_{b}"] = batch_pickle(
            data, labels, f"training batch {b} of 5".encode()
        )
    data, labels = planar_batch(10_000, test_images)
    members["cifar-10-batches-py/test_batch"] = batch_pickle(data, labels, b"testing batch 1 of 1")
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {
            b"label_names": [
                b"airplane",
                b"automobile",
                b"bird",
                b"cat",
                b"deer",
                b"dog",
                b"frog",
                b"horse",
                b"ship",
                b"truck",
            ],
            b"num_vis": 3072,
        },
        protocol=2,
    )
    return members


def write_members(path: Path, members: dict[str, bytes]) -> str:
    """A tar.gz of ``members`` in order; returns its SHA-256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_archive(
    path: Path, train_per_batch: int = TRAIN_PER_BATCH, test_images: int = TEST_IMAGES
) -> str:
    """Write the archive; returns its SHA-256."""
    return write_members(path, batch_members(train_per_batch, test_images))


def write_archive_with_label_10(path: Path) -> str:
    """A real-format archive whose third training batch has label 10 at index 5 (what a
    mirror could serve under its own checksum); returns its SHA-256."""
    pixels, labels = planar_batch(16, 8)
    labels[5] = 10
    members = {**batch_members(), "cifar-10-batches-py/data_batch_3":
               batch_pickle(pixels, labels, b"b3")}
    return write_members(path, members)


# --- the bytes Python 2 wrote --------------------------------------------------------------
# The real archive was pickled by Python 2's cPickle (protocol 2) with NumPy 1. It cannot be
# downloaded in the tests, so these helpers write the same opcodes by hand: byte strings
# as (SHORT_)BINSTRING, small ints as BININT1/BININT2, numpy.core.multiarray._reconstruct,
# numpy.dtype called as dtype('u1', 0, 1) and given its state by BUILD, lists in APPENDS
# runs of 1000, as cPickle batches them.


def _py2_string(value: bytes) -> bytes:
    if len(value) < 256:
        return b"U" + bytes([len(value)]) + value
    return b"T" + struct.pack("<I", len(value)) + value


def _py2_int(value: int) -> bytes:
    if 0 <= value < 256:
        return b"K" + bytes([value])
    if 0 <= value < 65536:
        return b"M" + struct.pack("<H", value)
    return b"J" + struct.pack("<i", value)


def _py2_list(items: list[bytes]) -> bytes:
    out = b"]"
    for start in range(0, len(items), 1000):
        out += b"(" + b"".join(items[start : start + 1000]) + b"e"
    return out


def python2_batch(data: np.ndarray, labels: list[int], batch_label: bytes) -> bytes:
    """The pickle of one batch as the real archive holds it (Python 2 cPickle, NumPy 1)."""
    rows, cols = data.shape
    array = (
        b"cnumpy.core.multiarray\n_reconstruct\n"
        + b"cnumpy\nndarray\n" + _py2_int(0) + b"\x85" + _py2_string(b"b") + b"\x87R"
        + b"(" + _py2_int(1) + _py2_int(rows) + _py2_int(cols) + b"\x86"
        + b"cnumpy\ndtype\n" + _py2_string(b"u1") + _py2_int(0) + _py2_int(1) + b"\x87R"
        + b"(" + _py2_int(3) + _py2_string(b"|") + b"NNN" + b"J\xff\xff\xff\xff" * 2
        + _py2_int(0) + b"tb"
        + b"\x89" + _py2_string(data.tobytes()) + b"tb"
    )  # fmt: skip
    entries = [
        (b"data", array),
        (b"labels", _py2_list([_py2_int(v) for v in labels])),
        (b"batch_label", _py2_string(batch_label)),
        (b"filenames", _py2_list([_py2_string(b"x.png")] * len(labels))),
    ]
    body = b"".join(_py2_string(key) + value for key, value in entries)
    return b"\x80\x02}(" + body + b"u."
