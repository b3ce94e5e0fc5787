"""Resolving --weights: the ImageNet download into the cache, offline hosts, bad files.

The download is exercised against a file in the real file's format served from
127.0.0.1 (WORKLOADS_VGG19_URL/MD5 point the unchanged code at it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.style.conftest import WeightsFile
from workloads.errors import WorkloadError
from workloads.style import weights


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WORKLOADS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "vgg19" / weights.FILE_NAME


def test_imagenet_is_downloaded_once_then_read_from_the_cache(
    cache: Path, file_server: str, vgg_weights_file: WeightsFile, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_VGG19_URL", f"{file_server}/{weights.FILE_NAME}")
    monkeypatch.setenv("WORKLOADS_VGG19_MD5", vgg_weights_file.md5)
    source = weights.resolve("imagenet")
    assert source == weights.WeightsSource("imagenet", cache)
    assert cache.read_bytes() == vgg_weights_file.path.read_bytes()
    assert [p.name for p in cache.parent.iterdir()] == [weights.FILE_NAME]  # no .part left

    monkeypatch.setenv("WORKLOADS_VGG19_URL", "http://127.0.0.1:9/unreachable")
    assert weights.resolve("imagenet").path == cache  # offline now: the cache answers


def test_offline_and_not_cached_says_which_file_to_put_where(
    cache: Path, closed_port_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_VGG19_URL", closed_port_url)
    with pytest.raises(WorkloadError) as info:
        weights.resolve("imagenet")
    message = info.value.one_line()
    assert weights.FILE_NAME in message and f"{cache.parent}"[-20:] in message
    assert "download failed" in message and "\n" not in message
    assert not cache.exists() and list(cache.parent.iterdir()) == []


def test_download_with_the_wrong_checksum_leaves_nothing(
    cache: Path, file_server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKLOADS_VGG19_URL", f"{file_server}/{weights.FILE_NAME}")
    with pytest.raises(WorkloadError, match=r"has MD5 \w+\.\.\., not 253f8cb5"):
        weights.resolve("imagenet")  # the fixture is not Keras' file: MD5 differs
    assert list(cache.parent.iterdir()) == []


def test_corrupt_cached_file_is_reported_not_used(cache: Path) -> None:
    cache.parent.mkdir(parents=True)
    cache.write_bytes(b"\x89HDF\r\n\x1a\n truncated")
    with pytest.raises(WorkloadError) as info:
        weights.resolve("imagenet")
    assert weights.FILE_NAME in info.value.one_line() and "delete it" in info.value.one_line()


def test_local_files_must_exist_and_be_hdf5_or_keras(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="does not exist"):
        weights.resolve(str(tmp_path / "missing.h5"))
    text = tmp_path / "weights.h5"
    text.write_text("<html>404</html>")  # what a failed wget leaves behind
    with pytest.raises(WorkloadError, match="neither HDF5"):
        weights.resolve(str(text))
    assert weights.resolve("random") == weights.WeightsSource("random")
