"""The CIFAR-10 archive: decoding of the real format, SHA-256 checks, download, errors."""

from __future__ import annotations

import io
import pickle
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.loopback_http import serve_directory
from tests.workloads.cifar_fixture import TEST_IMAGES, TRAIN_PER_BATCH, pixel
from tests.workloads.conftest import Archive, assert_one_line_error, run_cli
from workloads.cifar10 import data
from workloads.errors import WorkloadError


@pytest.fixture
def expect_sha256(cifar_archive: Archive, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKLOADS_CIFAR10_SHA256", cifar_archive.sha256)


def test_decode_puts_every_byte_where_it_belongs(cifar_archive: Archive) -> None:
    cifar = data.load_archive(cifar_archive.path)
    assert cifar.x_train.shape == (5 * TRAIN_PER_BATCH, 32, 32, 3)
    assert cifar.x_train.dtype == np.uint8
    assert cifar.x_test.shape == (TEST_IMAGES, 32, 32, 3)
    n, r, c = np.meshgrid(
        np.arange(5 * TRAIN_PER_BATCH), np.arange(32), np.arange(32), indexing="ij"
    )
    for channel in range(3):
        expected = (n * 7 + channel * 50 + r * 3 + c) % 256
        np.testing.assert_array_equal(cifar.x_train[..., channel], expected)
    assert cifar.x_test[3, 5, 9, 2] == pixel(10_003, 2, 5, 9)
    np.testing.assert_array_equal(cifar.y_train, np.arange(5 * TRAIN_PER_BATCH) % 10)
    np.testing.assert_array_equal(cifar.y_test, (10_000 + np.arange(TEST_IMAGES)) % 10)


def test_wrong_sha256_is_refused(cifar_archive: Archive) -> None:
    with pytest.raises(WorkloadError, match=r"has SHA-256 .* not 6d958be07457"):
        data.locate_archive(cifar_archive.path)


def test_archive_in_data_dir_is_used(cifar_archive: Archive, expect_sha256: None) -> None:
    assert data.locate_archive(cifar_archive.path.parent) == cifar_archive.path


def test_missing_archive_names_the_file_and_the_url(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match=r"cifar-10-python.tar.gz not found.*download https://"):
        data.locate_archive(tmp_path)


def test_corrupt_archive_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = tmp_path / data.ARCHIVE_NAME
    bad.write_bytes(b"\x1f\x8b not really gzip")
    monkeypatch.setenv("WORKLOADS_CIFAR10_SHA256", data.sha256sum(bad))
    with pytest.raises(WorkloadError, match="not a valid CIFAR-10 python archive"):
        data.load_archive(data.locate_archive(bad))


@pytest.fixture
def archive_server(cifar_archive: Archive) -> Iterator[str]:
    """Serve the fixture archive on 127.0.0.1 (an ephemeral port) over plain HTTP."""
    with serve_directory(cifar_archive.path.parent) as url:
        yield f"{url}/{data.ARCHIVE_NAME}"


def test_download_verifies_and_caches(
    archive_server: str, expect_sha256: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKLOADS_CIFAR10_URL", archive_server)
    path = data.locate_archive(None)
    assert path == tmp_path / "cache" / data.ARCHIVE_NAME
    assert data.load_archive(path).x_train.shape[0] == 5 * TRAIN_PER_BATCH
    monkeypatch.setenv("WORKLOADS_CIFAR10_URL", "http://127.0.0.1:9/gone")
    assert data.locate_archive(None) == path  # second call: from the cache, no network


def test_download_with_wrong_sha256_leaves_nothing(
    archive_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKLOADS_CIFAR10_URL", archive_server)
    with pytest.raises(WorkloadError, match="has SHA-256"):
        data.locate_archive(None)
    assert list((tmp_path / "cache").iterdir()) == []


def test_offline_download_says_where_to_put_the_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WORKLOADS_CIFAR10_URL", "http://127.0.0.1:9/cifar-10-python.tar.gz")
    with pytest.raises(WorkloadError, match=r"cannot download .*place cifar-10-python.tar.gz in"):
        data.locate_archive(None)


def test_pipeline_crops_flips_and_drops_the_partial_batch(cifar_archive: Archive) -> None:
    import tensorflow as tf

    cifar = data.load_archive(cifar_archive.path)
    train = data.real_dataset(
        tf, cifar.x_train, cifar.y_train, global_batch=16, image_size=24, crop=24, train=True
    )
    x, y = next(iter(train))
    assert x.shape == (16, 24, 24, 3) and y.shape == (16,)
    assert abs(float(tf.reduce_mean(x[0]))) < 1e-4  # per-image standardisation
    test = data.real_dataset(
        tf, cifar.x_test, cifar.y_test, global_batch=3, image_size=128, crop=None, train=False
    )
    batches = list(test)
    assert len(batches) == TEST_IMAGES // 3  # the partial batch of 2 is dropped
    assert batches[0][0].shape == (3, 128, 128, 3)
    np.testing.assert_array_equal(batches[0][1].numpy(), cifar.y_test[:3])


def _windows(source: np.ndarray, size: int) -> list[tuple[int, int, bool, np.ndarray]]:
    """Every ``size``×``size`` window of an HWC image, as is and mirrored left-right."""
    found = []
    for top in range(source.shape[0] - size + 1):
        for left in range(source.shape[1] - size + 1):
            window = source[top : top + size, left : left + size]
            found += [(top, left, False, window), (top, left, True, window[:, ::-1])]
    return found


def _standardised(x: np.ndarray) -> np.ndarray:
    """tf.image.per_image_standardization, in NumPy."""
    return (x - x.mean()) / max(float(x.std()), 1.0 / np.sqrt(x.size))


def test_batched_crops_take_an_independent_window_of_each_image() -> None:
    """Each image's crop is an unmirrored window of that image (not of another), and the
    windows differ across the batch: the vectorised crop behaves like one random_crop
    per image."""
    import tensorflow as tf

    images = np.arange(64 * 8 * 8, dtype=np.float32).reshape(64, 8, 8, 1)  # unique values
    crops = data.random_crops(tf, tf.constant(images), 5).numpy()
    assert crops.shape == (64, 5, 5, 1)
    places = set()
    for image, crop in zip(images, crops, strict=True):
        matches = [
            (top, left)
            for top, left, mirrored, window in _windows(image, 5)
            if not mirrored and np.array_equal(window, crop)
        ]
        assert len(matches) == 1
        places.add(matches[0])
    assert len(places) > 4  # 16 possible windows; one shared offset would give 1


def test_batch_augmentation_crops_flips_some_and_standardises_each_image() -> None:
    import tensorflow as tf

    images = np.random.default_rng(0).integers(0, 256, (32, 28, 28, 3), dtype=np.uint8)
    out = data.preprocess_batch(tf, tf.constant(images), 24, 24, train=True).numpy()
    assert out.shape == (32, 24, 24, 3)
    np.testing.assert_allclose(out.mean(axis=(1, 2, 3)), 0, atol=1e-4)
    flips = []
    for image, result in zip(images.astype(np.float32) / 255.0, out, strict=True):
        matches = [
            mirrored
            for _, _, mirrored, window in _windows(image, 24)
            if np.allclose(_standardised(window), result, atol=1e-4)
        ]
        assert len(matches) == 1  # exactly one window of this image, mirrored or not
        flips += matches
    assert 0 < sum(flips) < len(flips)  # some flipped, some not


# --- hostile archives: a batch must never run code ---------------------------------------


def _archive_with(path: Path, batch: bytes) -> Path:
    """An archive whose first training batch is ``batch`` (a hand-written pickle)."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(data.TRAIN_MEMBERS[0])
        info.size = len(batch)
        tar.addfile(info, io.BytesIO(batch))
    return path


def _file_creating_pickle(target: Path) -> bytes:
    """Protocol-0 pickle of ``builtins.open(target, "w")``: unpickled, it creates ``target``."""
    return f"cbuiltins\nopen\n(V{target}\nVw\ntR.".encode()


def test_a_pickle_that_creates_a_file_is_refused_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "pwned"
    hostile = _archive_with(tmp_path / data.ARCHIVE_NAME, _file_creating_pickle(target))
    monkeypatch.setenv("WORKLOADS_CIFAR10_SHA256", data.sha256sum(hostile))  # checksum passes
    with pytest.raises(WorkloadError, match=r"is refused: data_batch_1 asks for builtins\.open"):
        data.load_archive(data.locate_archive(hostile))
    assert not target.exists()


def test_hostile_archive_on_the_command_line_exits_2_with_one_line(
    tmp_path: Path, isolated_env: dict[str, str]
) -> None:
    target = tmp_path / "pwned"
    hostile = _archive_with(tmp_path / data.ARCHIVE_NAME, _file_creating_pickle(target))
    env = {**isolated_env, "WORKLOADS_CIFAR10_SHA256": data.sha256sum(hostile)}
    result = run_cli(
        ["cifar10", "--data", "cifar10", "--data-dir", str(tmp_path), "--epochs", "1"], env
    )
    assert result.returncode == 2
    assert_one_line_error(result, "cifar10", "builtins.open", "may run code", "download")
    assert not target.exists()


def test_object_arrays_are_refused(tmp_path: Path) -> None:
    """An object array's items are pickles themselves: the dtype alone is refused."""
    raw = pickle.dumps({b"data": np.array([b"x"], dtype=object), b"labels": [0]}, protocol=2)
    with pytest.raises(data.RefusedPickle, match="the dtype O8, which no CIFAR-10 batch uses"):
        data.decode_batch(raw)


def test_the_python2_numpy1_globals_of_the_real_archive_are_allowed() -> None:
    """The real file names numpy.core.multiarray (NumPy 1); ours write numpy._core."""
    planar = np.arange(2 * 3072, dtype=np.uint8).reshape(2, 3072)
    raw = pickle.dumps({b"data": planar, b"labels": [3, 4]}, protocol=2)
    numpy1 = raw.replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    assert numpy1 != raw or b"numpy.core.multiarray" in raw
    images, labels = data.decode_batch(numpy1)
    assert images.shape == (2, 32, 32, 3) and labels.tolist() == [3, 4]
    assert images[1, 0, 0, 2] == planar[1, 2048]


def test_the_retired_md5_variable_is_refused_by_name(
    cifar_archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CIFAR10_MD5", "c58f30108f718f92721af3b95e74349a")
    with pytest.raises(WorkloadError, match=r"WORKLOADS_CIFAR10_MD5 is no longer read.*set "
                                            "WORKLOADS_CIFAR10_SHA256"):
        data.locate_archive(cifar_archive.path)


def test_an_override_that_is_not_a_sha256_is_refused(
    cifar_archive: Archive, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_CIFAR10_SHA256", "c58f30108f718f92721af3b95e74349a")
    with pytest.raises(WorkloadError, match="is not a SHA-256"):
        data.locate_archive(cifar_archive.path)
