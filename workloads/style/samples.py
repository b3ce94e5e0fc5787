"""The bundled sample images, drawn by code so the project may ship them under its licence.

``workloads style`` needs a content and a style image to run with no arguments
but ``--output``. Photographs and paintings carry their authors' rights, so the
two samples are generated here, deterministically, and the PNGs in
``workloads/assets`` are this module's output (regenerate with
``python -m workloads.style.samples``):

* content: a landscape - sky gradient, sun, two mountain ranges, a lake with
  their reflection, a row of trees - with the large shapes and edges that
  relu4_2/relu5_2 content features respond to;
* style: brush strokes in a blue/yellow palette following a swirling flow field,
  the kind of texture Gram matrices capture.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from workloads import safefs
from workloads.style.images import SAMPLE_CONTENT, SAMPLE_STYLE, encode_png

CONTENT_SIZE = (320, 240)
STYLE_SIZE = (256, 256)


def _ridge(width: int, base: float, amplitudes: list[tuple[float, float, float]]) -> np.ndarray:
    """Height (in rows) of a mountain ridge: ``base`` plus a sum of phase-shifted sines."""
    x = np.arange(width) / width
    ridge = np.full(width, base)
    for amplitude, frequency, phase in amplitudes:
        ridge += amplitude * np.sin(2 * math.pi * frequency * x + phase)
    return ridge


def landscape(size: tuple[int, int] = CONTENT_SIZE) -> Image.Image:
    """The content sample: a mountain lake at dusk."""
    width, height = size
    horizon = int(height * 0.62)
    rows = np.arange(height)[:, None, None] / height
    top, low = np.array([40, 80, 160]), np.array([250, 190, 130])
    sky = top + (low - top) * np.clip(rows / 0.62, 0, 1) ** 1.5
    pixels = np.broadcast_to(sky, (height, width, 3)).copy()

    yy, xx = np.mgrid[0:height, 0:width]
    sun = (xx - width * 0.7) ** 2 + (yy - height * 0.36) ** 2 < (height * 0.07) ** 2
    pixels[sun] = [255, 235, 170]

    far = _ridge(width, height * 0.38, [(18, 1.3, 0.4), (9, 3.1, 1.7), (4, 7.0, 0.2)])
    near = _ridge(width, height * 0.50, [(14, 0.9, 2.2), (7, 2.7, 0.9), (3, 9.0, 1.1)])
    ranges = [(far, [95, 90, 130]), (near, [50, 70, 60])]
    for ridge, colour in ranges:
        shade = np.clip((yy - ridge[None, :]) / (horizon - ridge[None, :] + 1e-6), 0, 1)
        mountain = (yy >= ridge[None, :]) & (yy < horizon)
        tone = np.array(colour) * (1.0 - 0.35 * shade[..., None])
        pixels[mountain] = tone[mountain]

    # Lake: the scene above the horizon mirrored, darkened and rippled.
    depth = height - horizon
    ripple = (3 * np.sin(np.arange(depth) * 0.9)).astype(int)
    for offset in range(depth):
        source = np.roll(pixels[horizon - 1 - min(offset, horizon - 1)], ripple[offset], axis=0)
        pixels[horizon + offset] = source * 0.65 + np.array([10, 30, 60]) * 0.35

    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(image)
    rng = np.random.default_rng(7)
    for x in range(6, width // 3, 11):  # conifers on the left shore
        tall = int(rng.integers(22, 40))
        base = horizon + 2
        draw.polygon([(x - 6, base), (x + 6, base), (x, base - tall)], fill=(20, 45, 30))
        draw.line([(x, base), (x, base + 4)], fill=(50, 35, 25), width=2)
    return image.filter(ImageFilter.SMOOTH)


def swirls(size: tuple[int, int] = STYLE_SIZE, strokes: int = 2600) -> Image.Image:
    """The style sample: short brush strokes along a swirling flow field."""
    width, height = size
    rng = np.random.default_rng(11)
    image = Image.new("RGB", size, (22, 38, 92))
    draw = ImageDraw.Draw(image)
    palette = np.array(
        [
            [22, 48, 120],
            [40, 80, 170],
            [70, 120, 200],
            [120, 170, 220],
            [240, 210, 90],
            [250, 180, 40],
            [200, 220, 240],
            [15, 25, 60],
        ]
    )
    weights = np.array([0.2, 0.2, 0.16, 0.12, 0.1, 0.07, 0.08, 0.07])

    def angle(x: float, y: float) -> float:
        u, v = x / width, y / height
        return (
            2.4 * math.sin(2.1 * math.pi * u + 1.3 * math.cos(3.0 * math.pi * v))
            + 1.6 * math.cos(2.7 * math.pi * v - 0.8)
            + 0.9 * math.sin(5.0 * math.pi * (u + v))
        )

    for _ in range(strokes):
        x, y = float(rng.uniform(0, width)), float(rng.uniform(0, height))
        colour = palette[rng.choice(len(palette), p=weights)]
        jitter = rng.integers(-18, 19, size=3)
        fill = tuple(int(c) for c in np.clip(colour + jitter, 0, 255))
        points = [(x, y)]
        for _ in range(int(rng.integers(4, 9))):
            a = angle(x, y)
            x, y = x + 3.0 * math.cos(a), y + 3.0 * math.sin(a)
            points.append((x, y))
        draw.line(points, fill=fill, width=int(rng.integers(2, 5)), joint="curve")
    return image


def write_assets(directory: Path) -> list[Path]:
    """Write both samples into ``directory`` (the package's assets folder by default)."""
    written = []
    for name, image in ((SAMPLE_CONTENT, landscape()), (SAMPLE_STYLE, swirls())):
        path = directory / name
        safefs.write_bytes(path, encode_png(np.asarray(image)))
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "assets"
    for path in write_assets(target):
        print(path)
