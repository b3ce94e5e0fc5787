"""Write archives in the exact cifar-10-python.tar.gz format.

The benchmark uses this to measure the real input path (tar.gz -> pickle ->
planar decode -> tf.data) on hosts where the real archive cannot be downloaded:
same bytes layout, random pixels. (The tests build their archives independently,
byte by byte, so a mistake here and in the decoder cannot cancel out.)
"""

from __future__ import annotations

import io
import pickle
import tarfile
from pathlib import Path

import numpy as np

from workloads import safefs
from workloads.cifar10.batches import ROWS_MAX
from workloads.cifar10.data import TEST_MEMBER, TRAIN_MEMBERS

LABEL_NAMES = [
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
]


def encode_batch(images: np.ndarray, labels: np.ndarray, label: str) -> bytes:
    """(N, 32, 32, 3) uint8 HWC -> a pickled batch with channel-planar rows of 3072 bytes.

    N is at most 10000 and every label in 0-9, as in the real archive: the reader
    refuses any other batch, so writing one would only fail later.
    """
    if not 1 <= len(images) <= ROWS_MAX or len(labels) != len(images):
        raise ValueError(f"a CIFAR-10 batch holds 1 to {ROWS_MAX} images, one label each")
    if not all(0 <= int(v) <= 9 for v in labels):
        raise ValueError("CIFAR-10 labels are 0-9")
    planar = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), 3072)
    return pickle.dumps(
        {
            b"batch_label": label.encode(),
            b"labels": [int(v) for v in labels],
            b"data": planar,
            b"filenames": [f"{i:05d}.png".encode() for i in range(len(images))],
        },
        protocol=2,
    )


def write_archive(
    path: Path, x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray
) -> Path:
    """Split the training set over the five batches, as the real archive does."""
    members = {}
    for index, (images, labels) in enumerate(
        zip(np.array_split(x_train, 5), np.array_split(y_train, 5), strict=True), start=1
    ):
        members[TRAIN_MEMBERS[index - 1]] = encode_batch(
            images, labels, f"training batch {index} of 5"
        )
    members[TEST_MEMBER] = encode_batch(x_test, y_test, "testing batch 1 of 1")
    members["cifar-10-batches-py/batches.meta"] = pickle.dumps(
        {b"label_names": LABEL_NAMES, b"num_cases_per_batch": len(x_train) // 5, b"num_vis": 3072},
        protocol=2,
    )
    with safefs.writing(path) as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return path


def random_archive(path: Path, train: int = 5000, test: int = 1000, seed: int = 0) -> Path:
    """An archive of random pixels and labels in the real format."""
    rng = np.random.default_rng(seed)
    return write_archive(
        path,
        rng.integers(0, 256, (train, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, train),
        rng.integers(0, 256, (test, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, test),
    )
