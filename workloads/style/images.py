"""Images in and out: loading with clear errors, resizing, VGG preprocessing, PNG, colours.

Keras' ImageNet VGG19 weights come from Caffe: they expect BGR channel order with
the ImageNet mean pixel subtracted and no scaling ("caffe" mode). The optimised
image lives in that space; only the final and checkpoint images come back to RGB.
"""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import numpy as np
from PIL import Image

from workloads import bounded
from workloads.errors import WorkloadError
from workloads.records import atomic_write_bytes

# ImageNet mean pixel in BGR order, as keras.applications.vgg19.preprocess_input uses it.
MEAN_BGR = np.array([103.939, 116.779, 123.68], dtype=np.float32)

# VGG19 pools four times before block5_conv1: a side below 16 px leaves nothing there.
MIN_SIDE = 16

SAMPLE_CONTENT = "style-content-landscape.png"
SAMPLE_STYLE = "style-style-swirls.png"


def sample_path(name: str) -> Path:
    """Path of a sample image shipped in ``workloads/assets``."""
    return Path(str(resources.files("workloads") / "assets" / name))


def load_rgb(path: Path, role: str) -> np.ndarray:
    """Read ``path`` as an RGB uint8 array (H, W, 3); ``role`` names it in errors."""
    path = Path(path).expanduser()
    if not path.exists():
        raise WorkloadError(f"{role} image {path} does not exist", "check the path")
    try:
        with bounded.open_image(path) as image:  # its pixel count checked before decoding
            image.load()
            rgb = image.convert("RGB")
    except bounded.BadInput as exc:
        raise WorkloadError(
            f"{role} image {path} {exc}",
            "scale it down first (--width sets the output's)" if "pixels" in str(exc)
            else "give a PNG or JPEG file",
        ) from None
    except (OSError, SyntaxError, ValueError) as exc:  # directory, permissions, truncated file
        reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise WorkloadError(
            f"cannot read {role} image {path} ({reason})", "give a readable PNG or JPEG file"
        ) from exc
    return np.asarray(rgb, dtype=np.uint8)


def size_for_width(shape: tuple[int, ...], width: int) -> tuple[int, int]:
    """(height, width) at ``width`` with the aspect ratio of an (H, W, …) image."""
    height = max(1, round(width * shape[0] / shape[1]))
    return height, width


def resize(rgb: np.ndarray, height: int, width: int, role: str) -> np.ndarray:
    """Resize to (height, width); refuse sizes too small for VGG19's five blocks."""
    if min(height, width) < MIN_SIDE:
        raise WorkloadError(
            f"{role} image would be {width}x{height} px, below the {MIN_SIDE} px VGG19 needs",
            "use a larger --width (or --style-scales for a style image)",
        )
    if rgb.shape[:2] == (height, width):
        return rgb
    image = Image.fromarray(rgb).resize((width, height), Image.Resampling.LANCZOS)
    return np.asarray(image, dtype=np.uint8)


def style_size(style_shape: tuple[int, ...], output_width: int, scale: float) -> tuple[int, int]:
    """neural-style's rule: style width = scale × output width, aspect kept."""
    factor = scale * output_width / style_shape[1]
    return max(1, round(style_shape[0] * factor)), max(1, round(style_shape[1] * factor))


def preprocess(rgb: np.ndarray) -> np.ndarray:
    """RGB 0..255 (H, W, 3) → a batch of one in VGG's BGR mean-subtracted float32 space."""
    bgr = rgb[..., ::-1].astype(np.float32)
    return (bgr - MEAN_BGR)[np.newaxis]


def deprocess(batch: np.ndarray) -> np.ndarray:
    """Inverse of :func:`preprocess`, clipped to valid RGB uint8 (H, W, 3)."""
    bgr = np.asarray(batch, dtype=np.float32).reshape(batch.shape[-3:]) + MEAN_BGR
    return np.clip(bgr[..., ::-1], 0, 255).round().astype(np.uint8)


def preserve_colors(styled: np.ndarray, content: np.ndarray) -> np.ndarray:
    """Luminance (Y) of the styled image with the chroma (Cb, Cr) of the content.

    neural-style's ``--preserve-colors``: the style paints texture and brightness,
    the content keeps its colours. Full-range BT.601 YCbCr (JPEG's), as Pillow uses.
    """
    s = styled.astype(np.float64)
    c = content.astype(np.float64)
    y = 0.299 * s[..., 0] + 0.587 * s[..., 1] + 0.114 * s[..., 2]
    cb = -0.168736 * c[..., 0] - 0.331264 * c[..., 1] + 0.5 * c[..., 2]
    cr = 0.5 * c[..., 0] - 0.418688 * c[..., 1] - 0.081312 * c[..., 2]
    rgb = np.stack([y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb], axis=-1)
    return np.clip(rgb, 0, 255).round().astype(np.uint8)


def encode_png(rgb: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def save_png(path: Path, rgb: np.ndarray) -> None:
    """Write atomically: a killed run leaves the previous file or none, never half a PNG."""
    atomic_write_bytes(path, encode_png(rgb))
