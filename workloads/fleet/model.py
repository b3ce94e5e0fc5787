"""What the fleet report works on: figures per host and device, and the verdicts drawn from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Verdict = Literal["pass", "warn", "fail", "skip"]
VERDICT_ORDER: dict[str, int] = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}


def worst(verdicts: list[str]) -> str:
    """The most severe verdict of several (`pass` for none)."""
    return max(verdicts, key=lambda v: VERDICT_ORDER.get(v, 0), default="pass")


@dataclass(frozen=True)
class Figure:
    """One measured figure of one check on one host (and device, where the check is per device).

    `limit`, `fraction` and `verdict` are the battery's own comparison with the hardware's
    datasheet; `higher_is_better` says which side of the group's median is the bad one.
    """

    host: str
    check: str
    device: str | None
    value: float
    unit: str
    verdict: str = "pass"
    reason: str = ""
    limit: float | None = None
    warn_at: float | None = None
    fail_at: float | None = None
    higher_is_better: bool = True

    @property
    def series(self) -> str:
        """The figures compared with each other: one check, per device or per host."""
        return f"{self.check} per device" if self.device is not None else self.check


@dataclass
class Host:
    """One host's acceptance result: its hardware group and figures, or why it has none."""

    name: str
    group: str
    figures: list[Figure] = field(default_factory=list)
    error: str | None = None
    findings: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Outlier:
    """A figure well below its group's median (robust z-score and relative gap both large)."""

    figure: Figure
    median: float
    robust_z: float | None
    gap: float

    def reason(self) -> str:
        where = f"{self.figure.device} " if self.figure.device is not None else ""
        return (f"{where}{self.figure.check} {self.figure.value:.4g} {self.figure.unit} is "
                f"{self.gap:.0%} {'below' if self.figure.higher_is_better else 'above'} "
                f"the group median {self.median:.4g}")


@dataclass
class SeriesStats:
    """The robust statistics of one series in one group (None where the group is too small)."""

    group: str
    series: str
    hosts: int
    median: float | None
    mad: float | None
    low_bound: float | None
    high_bound: float | None


@dataclass
class HostVerdict:
    """The verdict on one host, with every reason a person can act on."""

    host: str
    group: str
    verdict: str
    reasons: list[str]


@dataclass
class FleetVerdict:
    """Everything the renderers draw: hosts, groups, statistics, outliers and verdicts."""

    hosts: list[Host]
    verdicts: list[HostVerdict]
    stats: list[SeriesStats]
    outliers: list[Outlier]
    small_groups: list[str]

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "warn": 0, "fail": 0}
        for verdict in self.verdicts:
            out[verdict.verdict] = out.get(verdict.verdict, 0) + 1
        return out
