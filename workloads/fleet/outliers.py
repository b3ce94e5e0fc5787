"""Robust outliers within a hardware group: the median and the median absolute deviation.

Why not the mean and standard deviation: one broken host drags both, and can hide itself
(in a group of four, a host at half speed moves the mean by an eighth and inflates the
deviation). The median and MAD ignore up to half the group being wrong. A figure is an
outlier when both hold:

* its modified z-score, 0.6745 × (x − median) / MAD, is beyond `Z_LIMIT` (3.5, Iglewicz and
  Hoaglin's recommendation) on the bad side; where the MAD is 0 (identical figures) any
  difference counts as beyond;
* it is at least `MIN_GAP` (10 %) of the median away: identical hosts measure within a few
  per cent of each other, and a host 2 % slow in a very tight group is not worth a person's
  time.

A figure `LARGE_GAP` (40 %) or more worse than its identical siblings' median is an outlier
whatever the spread: in a small group (four hosts, say) one noisy sibling can widen the MAD
enough to hide a host at half speed, and no healthy machine is 40 % off its twins.

A group of fewer than `MIN_GROUP` hosts gets no statistics: its hosts are judged by the
datasheet alone, and the report says so.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from workloads.fleet.model import Figure, Host, Outlier, SeriesStats

Z_LIMIT = 3.5
MIN_GAP = 0.10
LARGE_GAP = 0.40
MIN_GROUP = 3
_MAD_TO_Z = 0.6745


def robust_z(value: float, median: float, mad: float) -> float | None:
    """The modified z-score, or None where the MAD is 0 (no spread to scale by)."""
    if mad == 0:
        return None
    return _MAD_TO_Z * (value - median) / mad


def bounds(median: float, mad: float) -> tuple[float, float]:
    """The lowest and highest figure that is not an outlier (the rules at their edge)."""
    spread = min(max(Z_LIMIT * mad / _MAD_TO_Z, MIN_GAP * abs(median)), LARGE_GAP * abs(median))
    return median - spread, median + spread


def is_outlier(figure: Figure, median: float, mad: float) -> Outlier | None:
    """`figure` as an Outlier of its series, or None when it is within the group's spread."""
    if median == 0:
        return None
    bad_side = (median - figure.value) if figure.higher_is_better else (figure.value - median)
    gap = bad_side / abs(median)
    if gap < MIN_GAP:
        return None
    z = robust_z(figure.value, median, mad)
    if z is not None and abs(z) <= Z_LIMIT and gap < LARGE_GAP:
        return None
    return Outlier(figure=figure, median=median, robust_z=z, gap=gap)


def group_statistics(hosts: list[Host]) -> tuple[list[SeriesStats], list[Outlier], list[str]]:
    """Statistics of every series in every group, the outliers, and the groups too small."""
    by_group: dict[str, list[Host]] = defaultdict(list)
    for host in hosts:
        if host.ran:
            by_group[host.group].append(host)
    stats: list[SeriesStats] = []
    outliers: list[Outlier] = []
    small: list[str] = []
    for group, members in sorted(by_group.items()):
        series: dict[str, list[Figure]] = defaultdict(list)
        for host in members:
            for figure in host.figures:
                series[figure.series].append(figure)
        if len(members) < MIN_GROUP:
            small.append(group)
            stats.extend(SeriesStats(group, name, len(members), None, None, None, None)
                         for name in sorted(series))
            continue
        for name, figures in sorted(series.items()):
            values = [f.value for f in figures]
            median = statistics.median(values)
            mad = statistics.median(abs(v - median) for v in values)
            low, high = bounds(median, mad)
            stats.append(SeriesStats(group, name, len(members), median, mad, low, high))
            outliers.extend(o for f in figures if (o := is_outlier(f, median, mad)) is not None)
    return stats, outliers, small
