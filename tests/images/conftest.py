"""tfhost (scripts/tfhost) on the path; the cpu image and engine fixtures."""

from tests.host.tfhost_cli import ensure_importable
from tests.images.fixtures import cpu_image, memlock, pip_image

ensure_importable()

__all__ = ["cpu_image", "memlock", "pip_image"]
