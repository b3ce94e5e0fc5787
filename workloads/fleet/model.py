"""What the fleet report works on: figures per host and device, and the verdicts drawn from them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
    `scope` is the row's device text for a host-wide figure ("GPUs 0-7"): an all-reduce over
    eight GPUs is compared with other eight-GPU all-reduces, not with a four-GPU host's.
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
    scope: str = ""

    @property
    def series(self) -> str:
        """The figures compared with each other: one check, per device or per host."""
        if self.device is not None:
            return f"{self.check} per device"
        return f"{self.check} on {self.scope}" if self.scope.startswith("GPUs") else self.check


@dataclass(frozen=True)
class Link:
    """One GPU's NVLinks as NVML counted them: `active` of the board's `board` links.

    `judged` is False where the battery did not judge the links (a row it marked `info` or
    `skip`, such as one visible GPU with no peer): then only the siblings are compared.
    """

    device: str
    active: int
    board: int | None
    judged: bool


@dataclass
class Host:
    """One host's acceptance result: its hardware group and figures, or why it has none.

    Beside the figures it keeps what a fault removes, so the fleet can fail a host for what
    is missing: its GPU count (and the inventory's, where declared), each GPU's NVLinks, which
    rows (check and item) it has on which devices (and which of them only report a problem,
    such as an XID event: rows a healthy host does not have), the checks it was asked to run,
    and the record's own defects (`problems`: a partial record (`partial`), a figure that is
    not a number).
    """

    name: str
    group: str
    figures: list[Figure] = field(default_factory=list)
    error: str | None = None
    findings: list[tuple[str, str]] = field(default_factory=list)
    gpus: int = 0
    expected_gpus: int | None = None
    gpu_devices: list[str] = field(default_factory=list)
    gpu_uuids: list[str | None] = field(default_factory=list)  # NVML's, beside gpu_devices
    gpu_models: list[str] = field(default_factory=list)  # NVML's names, beside gpu_devices
    links: list[Link] = field(default_factory=list)
    rows: dict[str, set[str]] = field(default_factory=dict)
    row_notes: dict[str, str] = field(default_factory=dict)
    figure_keys: set[str] = field(default_factory=set)
    problem_rows: set[str] = field(default_factory=set)
    selected: list[str] = field(default_factory=list)
    partial: bool = False
    problems: list[Reason] = field(default_factory=list)
    started_at: str | None = None
    p2p: dict[str, Any] | None = None  # the battery's GPU-pair matrix, as its record holds it
    unreadable: bool = False  # its record could not be read (`error` says why)

    @property
    def ran(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Reason:
    """One cause of a verdict, in one line, with the rows behind it (`evidence`).

    `devices`: for a line about figures, the devices whose figures it is about (None: the
    host's own figures), so that lines about one device from several comparisons become one.
    """

    level: str
    text: str
    evidence: tuple[str, ...] = ()
    devices: tuple[str | None, ...] = ()

    def line(self) -> str:
        return f"{self.level}: {self.text}"


@dataclass(frozen=True)
class Outlier:
    """A figure well below what the other hosts of its group measure.

    `reference` is the median of the other hosts' figures of the same series, `scale` the
    spread it was judged with (their MAD, at least the noise floor), `gap` the share it is
    worse by, and `level` the severity the gap earns (`warn`, or `fail` from 30 % on).
    """

    figure: Figure
    reference: float
    robust_z: float
    gap: float
    level: str
    pair: bool = False  # a group of two: `reference` is the other host's
    peer: str | None = None  # a group of three: `reference` is this other host's, the best

    @property
    def against(self) -> str:
        return "the other host" if self.pair else (self.peer or "its group")

    def reason(self) -> str:
        where = f"{self.figure.device} " if self.figure.device is not None else ""
        side = "below" if self.figure.higher_is_better else "above"
        whose = ("the other host's" if self.pair else f"{self.peer}'s" if self.peer
                 else "its group's")
        of = ("the other host of its group of two" if self.pair else
              "the best of the two other hosts of its group of three" if self.peer
              else "the median of the other hosts")
        return (f"{where}{self.figure.check} {self.figure.value:.4g} {self.figure.unit} is "
                f"{self.gap:.0%} {side} {whose} {self.reference:.4g} ({of})")


@dataclass
class SeriesStats:
    """The robust statistics of one series in one group (None where the group is too small).

    The bounds are the whole group's, for the charts: each host itself is compared with the
    median of the others, which differs from the group's by at most a rank or two.
    """

    group: str
    series: str
    hosts: int
    median: float | None
    mad: float | None
    low_bound: float | None
    high_bound: float | None
    fail_bound: float | None = None


@dataclass
class HostVerdict:
    """The verdict on one host, with every reason a person can act on.

    `reasons` are one line per cause ("fail: 7 GPUs where its group has 8"); `evidence[i]`
    lists the rows behind `reasons[i]` (empty where the line says it all).
    """

    host: str
    group: str
    verdict: str
    reasons: list[str]
    evidence: list[list[str]] = field(default_factory=list)


@dataclass
class FleetVerdict:
    """Everything the renderers draw: hosts, groups, statistics, outliers and verdicts."""

    hosts: list[Host]
    verdicts: list[HostVerdict]
    stats: list[SeriesStats]
    outliers: list[Outlier]
    small_groups: list[str]
    note: str | None = None

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "warn": 0, "fail": 0}
        for verdict in self.verdicts:
            out[verdict.verdict] = out.get(verdict.verdict, 0) + 1
        return out
