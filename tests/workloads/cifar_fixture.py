"""Build small archives in the exact format of cifar-10-python.tar.gz.

Pixel values are a known function of (image, channel, row, column), so a test
can check that decoding puts every byte where it belongs (channel-planar input
to HWC output), not just that shapes match.
"""

from __future__ import annotations

import hashlib
import io
import pickle
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


def write_archive(
    path: Path, train_per_batch: int = TRAIN_PER_BATCH, test_images: int = TEST_IMAGES
) -> str:
    """Write the archive; returns its SHA-256."""
    members: dict[str, bytes] = {}
    for b in range(1, 6):
        data, labels = planar_batch((b - 1) * train_per_batch, train_per_batch)
        members[f"cifar-10-batches-py/data_batch_{b}"] = pickle.dumps(
            {
                b"batch_label": f"training batch {b} of 5".encode(),
                b"labels": labels,
                b"data": data,
                b"filenames": [b"x.png"] * train_per_batch,
            },
            protocol=2,
        )
    data, labels = planar_batch(10_000, test_images)
    members["cifar-10-batches-py/test_batch"] = pickle.dumps(
        {
            b"batch_label": b"testing batch 1 of 1",
            b"labels": labels,
            b"data": data,
            b"filenames": [b"y.png"] * test_images,
        },
        protocol=2,
    )
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
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, payload in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return hashlib.sha256(path.read_bytes()).hexdigest()
