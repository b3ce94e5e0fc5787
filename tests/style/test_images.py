"""Image loading, sizing, VGG preprocessing, colour preservation and the bundled samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from workloads.errors import WorkloadError
from workloads.style import images, samples


def test_preprocess_is_bgr_minus_the_imagenet_mean_and_deprocess_inverts_it() -> None:
    rgb = np.array([[[200, 100, 50], [0, 255, 10]]], dtype=np.uint8)
    batch = images.preprocess(rgb)
    assert batch.shape == (1, 1, 2, 3) and batch.dtype == np.float32
    np.testing.assert_allclose(batch[0, 0, 0], [50 - 103.939, 100 - 116.779, 200 - 123.68])
    np.testing.assert_array_equal(images.deprocess(batch), rgb)


def test_deprocess_clips_to_valid_pixels() -> None:
    batch = np.full((1, 1, 1, 3), 1000.0, dtype=np.float32)
    np.testing.assert_array_equal(images.deprocess(batch), [[[255, 255, 255]]])


def test_preserve_colors_takes_luma_from_the_result_and_chroma_from_the_content() -> None:
    styled = np.full((2, 2, 3), 100, dtype=np.uint8)  # grey: Y = 100
    content = np.full((2, 2, 3), [120, 100, 80], dtype=np.uint8)  # Cb −13.375, Cr 11.626
    out = images.preserve_colors(styled, content)
    np.testing.assert_array_equal(out[0, 0], [116, 96, 76])  # Y 100 with the content's chroma


def test_sizes_follow_the_width_and_neural_styles_style_scale_rule() -> None:
    assert images.size_for_width((240, 320, 3), 64) == (48, 64)
    assert images.style_size((256, 512, 3), 64, 1.0) == (32, 64)
    assert images.style_size((256, 256, 3), 64, 0.5) == (32, 32)


def test_resize_refuses_images_too_small_for_vgg19() -> None:
    rgb = np.zeros((240, 320, 3), dtype=np.uint8)
    assert images.resize(rgb, 16, 21, "content").shape == (16, 21, 3)
    with pytest.raises(WorkloadError, match="below the 16 px"):
        images.resize(rgb, 15, 20, "content")


def test_load_converts_any_mode_to_rgb(tmp_path: Path) -> None:
    path = tmp_path / "grey.png"
    Image.new("LA", (5, 4), (128, 255)).save(path)
    rgb = images.load_rgb(path, "style")
    assert rgb.shape == (4, 5, 3) and rgb.dtype == np.uint8 and (rgb == 128).all()


@pytest.mark.parametrize("kind", ["missing", "text", "directory", "truncated"])
def test_unusable_images_are_one_line_errors(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "image.png"
    if kind == "text":
        path.write_text("not an image\n")
    elif kind == "directory":
        path.mkdir()
    elif kind == "truncated":
        Image.new("RGB", (64, 64), (1, 2, 3)).save(path)
        path.write_bytes(path.read_bytes()[:60])
    with pytest.raises(WorkloadError) as info:
        images.load_rgb(path, "content")
    message = info.value.one_line()
    assert f"content image {path}" in message and "\n" not in message


def test_bundled_samples_exist_and_are_what_the_generator_draws(tmp_path: Path) -> None:
    content = images.load_rgb(images.sample_path(images.SAMPLE_CONTENT), "content")
    style = images.load_rgb(images.sample_path(images.SAMPLE_STYLE), "style")
    assert content.shape == (240, 320, 3) and style.shape == (256, 256, 3)
    regenerated = samples.write_assets(tmp_path)
    for shipped, fresh in zip((content, style), regenerated, strict=True):
        drawn = images.load_rgb(fresh, "sample")
        assert np.abs(drawn.astype(int) - shipped.astype(int)).mean() < 2.0
