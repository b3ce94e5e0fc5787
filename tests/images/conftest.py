"""tfhost (scripts/tfhost) on the path; the cpu image and engine fixtures; build times."""

import json
import os
from pathlib import Path

import pytest

from tests.host.tfhost_cli import ensure_importable
from tests.images.fixtures import cpu_image, memlock, pip_image
from tests.images.image_builds import BUILD_SECONDS, REPO

ensure_importable()

__all__ = ["cpu_image", "memlock", "pip_image"]


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every image build's wall time (cold, warm, or a rebuild after a touched workload),
    printed and kept as JSON for docs/development.md: reported, never asserted."""
    if not BUILD_SECONDS:
        return
    terminalreporter.section("image build times (seconds)")
    for tag, seconds in BUILD_SECONDS.items():
        terminalreporter.write_line(f"{tag:<60} {seconds:>8.1f}")
    path = Path(os.environ.get("TFHOST_RESULTS", REPO / "results")) / "image-build-times.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({k: round(v, 1) for k, v in BUILD_SECONDS.items()}, indent=2) + "\n")
    terminalreporter.write_line(f"written to {path}")
