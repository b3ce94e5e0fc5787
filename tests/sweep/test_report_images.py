"""A run's image is read by the bounded reader: the report shows a refused one, never decodes it.

The sweep report embeds every run's image (explorer) and draws it in the contact
sheet. The run's process left that file: over the pixel cap, a link, a FIFO or not
an image at all, it is refused before a pixel is decoded and the report goes on.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from PIL import Image

from tests.security.test_image_families import _png
from workloads import bounded
from workloads.sweep import contact_sheet, explorer


def _refused(kind: str, tmp_path: Path) -> Path:
    path = tmp_path / "run.png"
    if kind == "over the pixel cap":
        _png(path, 8192, bounded.IMAGE_PIXELS_MAX // 8192 + 1, 0)
    elif kind == "link":
        target = tmp_path / "elsewhere.png"
        Image.new("RGB", (8, 8)).save(target)
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    return path


@pytest.mark.parametrize("kind", ["over the pixel cap", "link", "fifo", "damaged"])
def test_a_refused_run_image_is_left_out_not_decoded(tmp_path: Path, kind: str) -> None:
    path = _refused(kind, tmp_path)
    assert explorer.image_data_uri(path) is None
    assert contact_sheet._thumbnail(path) is None


def test_an_image_within_the_caps_is_embedded_and_drawn(tmp_path: Path) -> None:
    path = tmp_path / "run.png"
    Image.new("RGB", (600, 300), (10, 20, 30)).save(path)
    uri = explorer.image_data_uri(path)
    assert uri is not None and uri.startswith("data:image/jpeg;base64,")
    thumbnail = contact_sheet._thumbnail(path)
    assert thumbnail is not None and thumbnail.size == (256, 128)
