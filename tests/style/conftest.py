"""Fixtures for the style-transfer tests: a VGG19 weights file and a local web server.

The real ImageNet file cannot be downloaded here, so the download path is tested
against a file in the same format (Keras 2's HDF5 ``save_weights`` layout, as
``vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5`` uses it) served from
127.0.0.1; the code under test is the code that fetches the real file.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tests.support.loopback_http import serve_directory
from workloads.style.vgg import VGG19_LAYERS
from workloads.style.weights import FILE_NAME


@dataclass(frozen=True)
class WeightsFile:
    path: Path
    md5: str
    arrays: dict[str, tuple[np.ndarray, np.ndarray]]  # layer -> (kernel, bias)


def write_keras2_weights(path: Path, seed: int = 3) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Write VGG19 (no top) weights in the layout Keras 2 ``save_weights`` produced."""
    import h5py

    rng = np.random.default_rng(seed)
    arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    channels_in = 3
    for name, kind, channels in VGG19_LAYERS:
        if kind == "conv":
            scale = 1.1 * np.sqrt(2.0 / (9 * channels_in))
            kernel = (rng.standard_normal((3, 3, channels_in, channels)) * scale).astype("float32")
            bias = (rng.standard_normal(channels) * 0.01).astype("float32")
            arrays[name] = (kernel, bias)
            channels_in = channels
    names = ["input_1"] + [name for name, _, _ in VGG19_LAYERS]
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [n.encode() for n in names]
        f.attrs["backend"] = b"tensorflow"
        f.attrs["keras_version"] = b"2.2.4"
        for name in names:
            group = f.create_group(name)
            if name in arrays:
                weight_names = [f"{name}_W_1:0".encode(), f"{name}_b_1:0".encode()]
                group.attrs["weight_names"] = weight_names
                for weight_name, value in zip(weight_names, arrays[name], strict=True):
                    group.create_dataset(weight_name.decode(), data=value)
            else:
                group.attrs["weight_names"] = []
    return arrays


@pytest.fixture(scope="session")
def vgg_weights_file(tmp_path_factory: pytest.TempPathFactory) -> WeightsFile:
    path = tmp_path_factory.mktemp("weights") / FILE_NAME
    arrays = write_keras2_weights(path)
    md5 = hashlib.md5(path.read_bytes(), usedforsecurity=False).hexdigest()
    return WeightsFile(path, md5, arrays)


@pytest.fixture
def file_server(vgg_weights_file: WeightsFile) -> Iterator[str]:
    """Serve the weights file's directory on 127.0.0.1; yields the base URL."""
    with serve_directory(vgg_weights_file.path.parent) as url:
        yield url


@pytest.fixture
def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens: what 'offline' looks like, instantly."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/{FILE_NAME}"


@pytest.fixture(scope="session", autouse=True)
def peak_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Every style run measures or reads the matmul peak: keep it out of the user's cache."""
    path = tmp_path_factory.mktemp("peak") / "peak-flops.json"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("WORKLOADS_PEAK_CACHE", str(path))
        yield path
