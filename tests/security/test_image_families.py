"""Decompression bombs given as a style image: small files that decode to gigabytes.

Pillow's own guard (``Image.MAX_IMAGE_PIXELS``, 89 million pixels) only warns below
twice that, so a 170-million-pixel PNG of a few hundred kilobytes decodes to 170 MB
as greyscale, 680 MB once converted to RGB (Pillow keeps four bytes a pixel), and
another 510 MB as a NumPy array: well over the 256 MiB budget before the style
transfer itself starts. :func:`workloads.bounded.open_image` checks the size the
header declares against :data:`workloads.bounded.IMAGE_PIXELS_MAX` before a pixel is
decoded. The family: a fixed-seed set of shapes (wide, tall, square) and modes, each
just past the cap or far past it, as content and as style, through ``workloads style``.
"""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

from tests.security.harness import Budget, FamilyReport, Sandbox, baseline, run_child
from workloads import bounded


def _png(path: Path, width: int, height: int, colour: int) -> None:
    """A PNG whose IDAT is ``height`` zero rows, compressed as a stream (no row list held).

    Built from the PNG specification's chunk layout (length, type, data, CRC-32); colour
    type 0 is greyscale and 2 truecolour (ISO/IEC 15948, 11.2.2), 8 bits a sample.
    """
    channels = {0: 1, 2: 3}[colour]
    row = b"\0" * (1 + width * channels)  # filter byte 0 (None), then the samples
    packer = zlib.compressobj(9)
    parts = [packer.compress(row) for _ in range(height)]
    data = b"".join(parts) + packer.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + \
            struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, colour, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data)
                     + chunk(b"IEND", b""))


def _shapes(seed: int = 48) -> list[tuple[int, int, int]]:
    """(width, height, colour): just past the cap and up to Pillow's own hard limit."""
    rng = random.Random(seed)
    cap = bounded.IMAGE_PIXELS_MAX
    shapes = []
    for factor in (1.01, 2.0, 5.0, 10.0):
        pixels = int(cap * factor)
        for aspect in (rng.uniform(0.05, 0.2), 1.0, rng.uniform(5, 20)):
            width = max(1, int((pixels * aspect) ** 0.5))
            shapes.append((width, -(-pixels // width), rng.choice((0, 2))))
    return shapes


def test_image_bombs_are_refused_within_budget(tmp_path: Path) -> None:
    box = Sandbox.make(tmp_path)
    budget = Budget(memory_mib=256, wall_s=60)
    report = FamilyReport("style images over the pixel cap", budget)
    out = str(box.trusted / "out.png")
    common = ["--weights", "random", "--width", "32", "--iterations", "1", "--output", out]
    missing = str(box.trusted / "missing.png")
    report.baseline_mib = baseline(["style", "--content", missing, *common], box, budget)
    for index, (width, height, colour) in enumerate(_shapes()):
        bomb = box.trusted / f"bomb{index}.png"
        _png(bomb, width, height, colour)
        role = "--content" if index % 2 else "--styles"
        outcome = run_child(["style", role, str(bomb), *common], box, budget)
        report.add(f"{width}x{height} colour {colour} as {role}", outcome)
        bomb.unlink()
    report.check()
