"""Where VGG19's weights come from: ``imagenet`` (downloaded once), ``random`` or a file.

The most duplicated issue of neural-style and its relatives is a weights file that
is missing, truncated or in the wrong format. So the ImageNet file is verified by
MD5 before use, and every failure names the exact file, its URL and where to put
it. Offline hosts copy the file into the cache directory once.
``random`` (seeded He-normal init times 1.1 per layer, see ``vgg.randomise``) needs
no download: it is for smoke tests and speed benchmarks, where the values of the
weights do not matter, only their shapes.
"""

from __future__ import annotations

import os
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from workloads import safefs
from workloads.bounded import BadInput, read_head
from workloads.download import ChecksumMismatch, fetch_verified, md5sum, pace_from_env
from workloads.errors import WorkloadError, clip

FILE_NAME = "vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5"
URL = "https://storage.googleapis.com/tensorflow/keras-applications/vgg19/" + FILE_NAME
MD5 = "253f8cb515780f3b799900260a226db6"  # as keras.applications.VGG19 checks it
FILE_BYTES = 80_134_624
MAX_BYTES = 2 * FILE_BYTES  # a download over twice the real file's size is refused
DOWNLOAD_TIMEOUT_S = 30


@dataclass(frozen=True)
class WeightsSource:
    """Resolved weights: ``kind`` is imagenet, random or file; ``path`` set unless random."""

    kind: str
    path: Path | None = None

    def describe(self) -> str:
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


def cache_dir() -> Path:
    """``$WORKLOADS_CACHE`` or ``~/.cache/workloads``, shared with the other downloads."""
    return Path(os.environ.get("WORKLOADS_CACHE", Path.home() / ".cache" / "workloads"))


def cached_path() -> Path:
    return cache_dir() / "vgg19" / FILE_NAME


def weights_url() -> str:
    """The download URL; ``WORKLOADS_VGG19_URL`` points it at a mirror."""
    return os.environ.get("WORKLOADS_VGG19_URL", URL)


def weights_md5() -> str:
    """Expected MD5; a mirror serving a different build sets ``WORKLOADS_VGG19_MD5``."""
    return os.environ.get("WORKLOADS_VGG19_MD5", MD5)


def resolve(spec: str) -> WeightsSource:
    """``imagenet`` → the cached (or freshly downloaded) file; ``random``; or a local path."""
    if spec == "random":
        return WeightsSource("random")
    if spec == "imagenet":
        return WeightsSource("imagenet", ensure_imagenet())
    path = Path(spec).expanduser()
    if not path.is_file():
        raise WorkloadError(
            f"weights file {path} does not exist",
            f"use --weights imagenet, --weights random, or a Keras VGG19 weights file "
            f"such as {FILE_NAME}",
        )
    if not looks_like_keras_weights(path):
        raise WorkloadError(
            f"weights file {path} is neither HDF5 (.h5) nor a Keras archive (.keras)",
            f"use a Keras VGG19 no-top weights file such as {FILE_NAME}",
        )
    return WeightsSource("file", path)


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
ZIP_SIGNATURE = b"PK\x03\x04"


def looks_like_keras_weights(path: Path) -> bool:
    """Cheap check before TensorFlow starts: an HDF5 or zip signature where they belong.

    HDF5 allows a user block, so its signature may sit at 0, 512, 1024, 2048, ….
    The full check (layer names and shapes) happens when Keras loads the file.
    """
    try:
        head = read_head(path, 4096)  # no link followed, never blocks on a FIFO
    except BadInput as exc:
        raise WorkloadError(f"weights file {path} {exc}", "give the weights file itself") from None
    except OSError as exc:
        raise WorkloadError(
            f"cannot read weights file {path} ({exc.strerror or exc})", "check its permissions"
        ) from exc
    if head.startswith(ZIP_SIGNATURE):
        return True
    return any(head[offset : offset + 8] == HDF5_SIGNATURE for offset in (0, 512, 1024, 2048))


def ensure_imagenet() -> Path:
    """The verified ImageNet file in the cache, downloading it on first use."""
    target = cached_path()
    if target.is_file():
        verify(target)
        return target
    return download(weights_url(), target)


def verify(path: Path) -> None:
    try:
        actual = md5sum(path)
    except (OSError, BadInput) as exc:
        raise WorkloadError(f"cannot read {path} ({_reason(exc)})",
                            "delete it to download it again") from None
    if actual != weights_md5():
        raise WorkloadError(
            f"{path} has MD5 {actual[:12]}..., not {weights_md5()[:12]}... (a wrong file)",
            "delete it to download it again",
        )


def download(url: str, target: Path) -> Path:
    """Fetch into the cache; the file appears only once its MD5 is right."""
    try:
        safefs.ensure_directory(target.parent)  # one component at a time, checked
    except safefs.UnsafePath as exc:
        raise WorkloadError(
            f"cannot create the weights cache {exc.path} ({exc.reason})",
            "set WORKLOADS_CACHE to a directory of yours",
        ) from None
    except OSError as exc:
        raise WorkloadError(
            f"cannot create the weights cache {target.parent} ({exc.strerror or exc})",
            "set WORKLOADS_CACHE to a writable directory",
        ) from exc
    try:
        return fetch_verified(
            url,
            target,
            weights_md5(),
            timeout=DOWNLOAD_TIMEOUT_S,
            max_bytes=MAX_BYTES,
            algorithm="md5",
            pace=pace_from_env(),
        )
    except ChecksumMismatch as exc:
        raise WorkloadError(
            f"the download from {url} has MD5 {exc.actual[:8]}..., not {exc.expected[:8]}...",
            f"check WORKLOADS_VGG19_URL, or put the file in {target.parent}",
        ) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise WorkloadError(
            f"VGG19 weights not cached, download failed ({clip(str(reason), 36)})",
            f"put {FILE_NAME} in {target.parent}",
        ) from exc


def _reason(exc: Exception) -> str:
    """An OSError's strerror (an I/O error, a permission), or BadInput's own line."""
    return str(getattr(exc, "strerror", None) or exc)
