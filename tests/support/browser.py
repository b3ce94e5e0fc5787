"""Debian's Chromium, headless, driven by Playwright: one fresh profile per test.

Why a fixture of its own: every page test needs the same flags (root, no GPU, no calls
home: without the background-networking flags Chromium keeps asking Google's hosts,
which this network refuses) and a fresh --user-data-dir.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run"]


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    """A new page in a fresh headless Chromium profile."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # launch_persistent_context passes --user-data-dir (a fresh profile) itself
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=CHROMIUM, headless=True, args=FLAGS
        )
        try:
            yield context.new_page()
        finally:
            context.close()
