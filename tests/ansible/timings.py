"""Durations the Ansible tests measure, printed at the end of the session and kept as JSON.

Performance is reported, never asserted: the numbers go to docs/development.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.ansible.playbook import REPO

TIMINGS: dict[str, float] = {}
TIMINGS_FILE = Path(os.environ.get("TFHOST_RESULTS", REPO / "results")) / "ansible-timings.json"


def record_timing(name: str, seconds: float) -> None:
    """Remember a measured duration (seconds, one decimal)."""
    TIMINGS[name] = round(seconds, 1)


def write_timings() -> Path | None:
    """Write the recorded durations as JSON; returns the path (None when nothing was measured)."""
    if not TIMINGS:
        return None
    TIMINGS_FILE.parent.mkdir(parents=True, exist_ok=True)
    TIMINGS_FILE.write_text(json.dumps(TIMINGS, indent=2) + "\n")
    return TIMINGS_FILE
