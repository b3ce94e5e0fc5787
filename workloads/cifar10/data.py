"""CIFAR-10 input: the official archive (download, SHA-256, safe decode) and tf.data pipelines.

The archive is Alex Krizhevsky's ``cifar-10-python.tar.gz``: five pickled
training batches and one test batch, each a dict with ``data`` (N x 3072 uint8,
channel-planar: 1024 red, 1024 green, 1024 blue bytes per image) and ``labels``.
Downloads are verified against the archive's SHA-256 before use; offline hosts
place the archive in ``--data-dir`` or the cache directory.

The batches are pickles, and ``pickle.loads`` runs whatever a pickle names. The
checksum alone is no guard (a mirror sets its own with
``WORKLOADS_CIFAR10_SHA256``; a user points ``--data-dir`` at any file), so the
archive is read with bounded memory (:mod:`workloads.cifar10.archive_reader`) and
each batch is decoded and checked to be CIFAR-10 (:mod:`workloads.cifar10.batches`)
before training sees it; a file that fails either is refused in one line.
"""

from __future__ import annotations

import os
import re
import tarfile
import urllib.error
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from workloads.bounded import BadInput
from workloads.cifar10.archive_reader import BadArchive, read_members
from workloads.cifar10.batches import (  # noqa: F401 - re-exported: the decoder's public names
    BadBatch,
    BatchUnpickler,
    RefusedPickle,
    decode_batch,
    unpickle_batch,
)
from workloads.download import (
    ChecksumMismatch,
    DownloadTooLarge,
    fetch_verified,
    pace_from_env,
    sha256sum,
)
from workloads.errors import WorkloadError, clip

ARCHIVE_NAME = "cifar-10-python.tar.gz"
ARCHIVE_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
# The digest Keras checks for this URL (keras/src/datasets/cifar10.py, file_hash=);
# the same archive has MD5 c58f30108f718f92721af3b95e74349a.
ARCHIVE_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
ARCHIVE_BYTES = 170_498_071
# Twice the real archive. Its content unpacks to 186 MB, so no repacking of it (any gzip
# level) comes near this; a server that sends more is not sending CIFAR-10, and the cap
# stops an endless or oversized download before it fills the cache's disk.
ARCHIVE_MAX_BYTES = 2 * ARCHIVE_BYTES
SHA256_ENV = "WORKLOADS_CIFAR10_SHA256"
RETIRED_MD5_ENV = "WORKLOADS_CIFAR10_MD5"
TRAIN_MEMBERS = tuple(f"cifar-10-batches-py/data_batch_{i}" for i in range(1, 6))
TEST_MEMBER = "cifar-10-batches-py/test_batch"
IMAGE_SHAPE = (32, 32, 3)
NUM_CLASSES = 10
DOWNLOAD_TIMEOUT_S = 20


@dataclass(frozen=True)
class Cifar10:
    """Decoded CIFAR-10: uint8 images (N, 32, 32, 3) and int32 labels (N,)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def cache_dir() -> Path:
    """``$WORKLOADS_CACHE`` or ``~/.cache/workloads``: where downloads are kept."""
    return Path(os.environ.get("WORKLOADS_CACHE", Path.home() / ".cache" / "workloads"))


def archive_url() -> str:
    """The download URL; ``WORKLOADS_CIFAR10_URL`` points it at a mirror."""
    return os.environ.get("WORKLOADS_CIFAR10_URL", ARCHIVE_URL)


def archive_sha256() -> str:
    """The expected SHA-256; a mirror with a repacked archive sets ``WORKLOADS_CIFAR10_SHA256``.

    The MD5 override this replaced is refused rather than ignored, so a mirror set
    up for it fails with a line that names the new variable instead of a mismatch.
    """
    if os.environ.get(RETIRED_MD5_ENV):
        raise WorkloadError(
            f"{RETIRED_MD5_ENV} is no longer read (MD5 collides)",
            f"unset it; set {SHA256_ENV} to the output of 'sha256sum ARCHIVE' instead",
        )
    value = os.environ.get(SHA256_ENV) or ARCHIVE_SHA256
    if not re.fullmatch(r"[0-9a-fA-F]{64}", value):
        raise WorkloadError(
            f"{SHA256_ENV}={value!r} is not a SHA-256 (64 hex digits)",
            f"set it to the output of 'sha256sum {ARCHIVE_NAME}', or unset it",
        )
    return value.lower()


def locate_archive(data_dir: Path | None, *, download: bool = True) -> Path:
    """Find the archive in ``data_dir`` or the cache, else download it into the cache.

    A file that is present but has the wrong SHA-256 is an error, never silently used
    or overwritten: it is the user's file, and the message says how to fix it.
    """
    if data_dir is not None:
        candidate = Path(data_dir) / ARCHIVE_NAME if Path(data_dir).is_dir() else Path(data_dir)
        if not candidate.is_file():
            raise WorkloadError(
                f"{candidate} not found",
                f"download {ARCHIVE_URL} and place it there, or drop --data-dir to use the cache",
            )
        verify(candidate)
        return candidate
    cached = cache_dir() / ARCHIVE_NAME
    if cached.is_file():
        verify(cached)
        return cached
    if not download:
        raise WorkloadError(
            f"CIFAR-10 archive not in {cached}", "pass --data-dir or allow download"
        )
    return fetch(archive_url(), cached)


def verify(path: Path) -> None:
    """Compare the archive's SHA-256 with the expected one (before any byte is unpickled).

    A file over :data:`ARCHIVE_MAX_BYTES` is refused before it is hashed: it is not
    CIFAR-10 whatever a mirror's checksum says, and hashing it would only cost time.
    """
    size = path.stat().st_size
    if size > ARCHIVE_MAX_BYTES:
        raise WorkloadError(
            f"{path} is {size} bytes, over the {ARCHIVE_MAX_BYTES} accepted (CIFAR-10: 170 MB)",
            "delete it and download it again",
        )
    expected = archive_sha256()
    try:
        actual = sha256sum(path)  # regular files only, no link followed, any I/O error caught
    except (OSError, BadInput) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise WorkloadError(f"cannot read {path} ({reason})",
                            "check the file (or delete it and download it again)") from None
    if actual != expected:
        raise WorkloadError(
            f"{path} has SHA-256 {actual[:12]}..., not {expected[:12]}... (a wrong file)",
            f"delete it and download {ARCHIVE_NAME} again",
        )


def fetch(url: str, dest: Path) -> Path:
    """Download ``url`` to ``dest``; the archive appears only once its SHA-256 is right."""
    expected = archive_sha256()
    try:
        return fetch_verified(
            url, dest, expected, timeout=DOWNLOAD_TIMEOUT_S, max_bytes=ARCHIVE_MAX_BYTES,
            pace=pace_from_env(),
        )
    except DownloadTooLarge as exc:
        raise WorkloadError(
            f"{url} is refused: it {exc}",
            "check WORKLOADS_CIFAR10_URL, or place the archive with --data-dir",
        ) from exc
    except ChecksumMismatch as exc:
        raise WorkloadError(  # digests cut to 12 digits: the line stays readable
            f"the downloaded archive has SHA-256 {exc.actual[:12]}..., not {exc.expected[:12]}...",
            f"check WORKLOADS_CIFAR10_URL and _SHA256, or place it in {dest.parent}",
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise WorkloadError(
            f"cannot download {url} ({reason})",
            f"offline: place {ARCHIVE_NAME} in {dest.parent} or pass --data-dir",
        ) from exc


def load_archive(path: Path) -> Cifar10:
    """Read and check the five training batches and the test batch straight from the tar.gz.

    Every batch is checked (dtype, shape, labels in 0-9) before any is used, so an
    archive that is not CIFAR-10 stops here in one line naming the batch, not later
    in training or, worse, not at all.
    """
    wanted = (*TRAIN_MEMBERS, TEST_MEMBER)
    fix = "delete it and download it again"
    parts: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    member = ""
    try:
        for member, raw in read_members(path, wanted):
            parts[member] = decode_batch(raw)
    except BadBatch as exc:
        raise WorkloadError(f"{path} is refused: {Path(member).name} {exc}", fix) from exc
    except BadArchive as exc:
        raise WorkloadError(f"{path} is refused: it {exc}", fix) from exc
    except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError, RecursionError) as exc:
        # tarfile lets a pax record's number through as ValueError (int() past 4300
        # digits), so any failure of the untrusted file ends here, named by its type.
        raise WorkloadError(
            f"{path} is not a valid CIFAR-10 python archive "
            f"({type(exc).__name__}: {clip(str(exc), 40)})",
            "delete it and download it again",
        ) from exc
    x_train = np.concatenate([parts[m][0] for m in TRAIN_MEMBERS])
    y_train = np.concatenate([parts[m][1] for m in TRAIN_MEMBERS])
    x_test, y_test = parts[TEST_MEMBER]
    return Cifar10(x_train, y_train, x_test, y_test)


# --- tf.data pipelines ------------------------------------------------------------------


def random_crops(tf: Any, images: Any, crop: int) -> Any:
    """An independent random ``crop``×``crop`` window of each image in a (B, H, W, C) batch.

    Two batched gathers (rows, then columns) instead of one ``random_crop`` per image:
    the whole batch is cropped by a handful of ops, not 4·B.
    """
    batch = tf.shape(images)[0]
    height, width = images.shape[1], images.shape[2]
    top = tf.random.uniform([batch], 0, height - crop + 1, dtype=tf.int32)
    left = tf.random.uniform([batch], 0, width - crop + 1, dtype=tf.int32)
    window = tf.range(crop)[tf.newaxis, :]
    rows = tf.gather(images, top[:, tf.newaxis] + window, axis=1, batch_dims=1)
    return tf.gather(rows, left[:, tf.newaxis] + window, axis=2, batch_dims=1)


def preprocess_batch(tf: Any, images: Any, size: int, crop: int | None, train: bool) -> Any:
    """A uint8 (B, H, W, C) batch -> float32, augmented in training, standardised per image.

    Vectorised over the batch (every op here takes a 4-D tensor and treats each image
    on its own): per-image ``map`` calls cost more than the small CNN's training step
    on a 2-core CPU, and the input pipeline shares those cores with the model.
    """
    images = tf.cast(images, tf.float32) / 255.0
    if crop is not None:  # tutorial CNN: random 24x24 crop for training, centre crop for test
        images = (
            random_crops(tf, images, crop)
            if train
            else tf.image.resize_with_crop_or_pad(images, crop, crop)
        )
    elif train:  # larger models: pad 4 and crop back, the usual CIFAR augmentation
        images = random_crops(tf, tf.image.resize_with_crop_or_pad(images, 40, 40), 32)
    if train:
        images = tf.image.random_flip_left_right(images)  # 4-D: each image flipped or not
    if size != images.shape[1]:
        images = tf.image.resize(images, (size, size))
    return tf.image.per_image_standardization(images)


def real_dataset(
    tf: Any,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    global_batch: int,
    image_size: int,
    crop: int | None,
    train: bool,
    seed: int = 0,
) -> Any:
    """A shuffled, batched, augmented (per batch) and prefetched dataset over the arrays.

    ``drop_remainder`` is always on: a last partial batch would leave some replicas
    of a MirroredStrategy with no data, which makes BatchNorm produce NaN (seed 003).
    """
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    if train:
        ds = ds.shuffle(min(len(images), 10_000), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(global_batch, drop_remainder=True)
    ds = ds.map(
        lambda x, y: (preprocess_batch(tf, x, image_size, crop, train), y),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=not train,
    )
    if train:
        ds = ds.repeat()
    return _shard_by_data(tf, ds).prefetch(tf.data.AUTOTUNE)


def _shard_by_data(tf: Any, ds: Any) -> Any:
    """Multi-worker runs shard in-memory data by element (there are no files to split)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(options)


def synthetic_dataset(tf: Any, *, global_batch: int, image_size: int, seed: int = 0) -> Any:
    """One random batch repeated forever: measures the model alone, with no input cost."""
    from workloads.cifar10.synthetic import random_batch

    x, y = random_batch(global_batch, image_size, seed)
    return _shard_by_data(tf, tf.data.Dataset.from_tensors((x, y)).repeat())
