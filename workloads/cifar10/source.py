"""Resolve ``--data`` to the images a run trains on, before any framework loads.

Why a step of its own: finding, hashing and decoding the archive needs only
NumPy. Done first, a missing, corrupt or hostile archive is refused in one line
within a second or two, instead of after TensorFlow's import (several seconds,
more on a cold page cache) and the device setup.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from workloads.cifar10 import data as cifar_data
from workloads.errors import WorkloadError


@dataclass(frozen=True)
class DataSource:
    """What the run trains on: the real archive, decoded, or (without one) synthetic images."""

    archive: Path | None = None
    cifar: cifar_data.Cifar10 | None = None
    fallback_reason: str | None = None

    @property
    def kind(self) -> str:
        """The record's ``data``: ``cifar10`` or ``synthetic``."""
        return "synthetic" if self.cifar is None else "cifar10"


def choose_data(data: str, data_dir: str | None) -> DataSource:
    """``--data cifar10`` must find a valid archive; ``auto`` falls back to synthetic data
    with a note on stderr; ``synthetic`` reads nothing."""
    if data not in ("cifar10", "auto"):
        return DataSource()
    try:
        archive = cifar_data.locate_archive(Path(data_dir) if data_dir else None)
    except WorkloadError as exc:
        if data == "cifar10":
            raise
        print(
            f"note: real CIFAR-10 unavailable ({exc.problem}); using synthetic data",
            file=sys.stderr,
        )
        return DataSource(fallback_reason=exc.problem)
    return DataSource(archive, cifar_data.load_archive(archive))
