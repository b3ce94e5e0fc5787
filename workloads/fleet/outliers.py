"""Robust outliers within a hardware group: each host against the median of the others.

Why the median and the median absolute deviation (MAD), not the mean and standard deviation:
one broken host drags both, and can hide itself. Why the median of the *other* hosts rather
than the group's: in a small group the host under test is one of the few figures the median
and the MAD are taken from, so a slow host widens the very spread it is judged by. In the
group [100, 80, 100, 65] the group's MAD (17.5) hides the 65 entirely; against the other
three ([100, 80, 100]: median 100, MAD 0) it is 35 % below and found.

The rule, for one figure `x` of a host and the figures of the same series on the other hosts
of its group (`reference` = their median, `mad` = their MAD):

* `gap` = how much worse `x` is than `reference`, as a share of it (below it for a figure
  where higher is better, above it otherwise);
* the spread it is judged against is the MAD, but never less than `NOISE_FLOOR` (2 %) of the
  reference: identical machines still differ run to run (Llama 3 reports 1-2 % throughput
  variation on 16,384 H100s), so a MAD of 0 (identical figures) is not a licence to flag a
  figure 0.1 % off; the floor also makes the modified z-score defined at a MAD of 0;
* it is an outlier, `warn`, when its modified z-score, 0.6745 × (x − reference) / spread, is
  beyond `Z_LIMIT` (3.5, Iglewicz and Hoaglin's recommendation) on the bad side and the gap
  is at least `MIN_GAP` (10 %), so a host a few per cent slow in a very tight group is not
  worth a person's time;
* it is `fail` when the gap is `FAIL_GAP` (30 %) or more, whatever the spread: no healthy
  machine is 30 % off its identical siblings, and a noisy group must not hide one that is
  (the battery draws the same line between a host's own GPUs).

Defined at the edges: a reference of 0 or below (no other host measured anything) ranks
nothing (the hosts' own verdicts speak); a figure that is not a number, infinite or negative
never reaches this module: reading the record names it as the host's failure. A series held
by fewer than `MIN_GROUP` hosts gets no statistics, and a group that small is named in the
report as judged by its records and the datasheet alone.

A group of three has a median of the others, but of two: their mean, which a second slow
host drags halfway down ([100, 60, 60] would pass both 60s). So there, beside the
statistics, each figure is also held to the pair's rule against the better of the other
two hosts (`_trio_outliers`).

A group of two (two hosts, or a series only two hosts of a group hold) has no median of
"the others" but the other host, and no spread to judge a modest gap by: which of two
figures 12 % apart is the odd one cannot be told. A gap of `FAIL_GAP` (30 %) or more can:
no healthy machine is 30 % worse than an identical sibling, and the worse of the two is the
faulty one (a healthy machine does not run faster than healthy). So in a pair each figure
is compared with the other host's (its median, for a figure per GPU) and only the `fail`
rule applies: 30 % or more worse fails the worse host, anything less is left to the
datasheet and the records, as for a host alone.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from dataclasses import replace

from workloads.fleet.model import Figure, Host, Outlier, SeriesStats

Z_LIMIT = 3.5
MIN_GAP = 0.10
FAIL_GAP = 0.30
NOISE_FLOOR = 0.02
MIN_GROUP = 3
_MAD_TO_Z = 0.6745


def robust_z(value: float, reference: float, mad: float) -> float:
    """The modified z-score, with the MAD floored at `NOISE_FLOOR` of the reference."""
    return _MAD_TO_Z * (value - reference) / spread(reference, mad)


def spread(reference: float, mad: float) -> float:
    """The spread a figure is judged against: the MAD, at least the run-to-run noise floor."""
    return max(mad, NOISE_FLOOR * abs(reference))


def bounds(reference: float, mad: float) -> tuple[float, float]:
    """The lowest and highest figure that is not an outlier (the rules at their edge)."""
    width = min(max(Z_LIMIT * spread(reference, mad) / _MAD_TO_Z, MIN_GAP * abs(reference)),
                FAIL_GAP * abs(reference))
    return reference - width, reference + width


def is_outlier(figure: Figure, reference: float, mad: float) -> Outlier | None:
    """`figure` as an Outlier against the others' median and MAD, or None when within them."""
    if not reference > 0:  # also catches NaN: nothing measured to compare with
        return None
    bad_side = (reference - figure.value) if figure.higher_is_better else (figure.value - reference)
    gap = bad_side / reference
    z = robust_z(figure.value, reference, mad)
    if gap >= FAIL_GAP:
        return Outlier(figure=figure, reference=reference, robust_z=z, gap=gap, level="fail")
    if gap >= MIN_GAP and abs(z) > Z_LIMIT:
        return Outlier(figure=figure, reference=reference, robust_z=z, gap=gap, level="warn")
    return None


def median_without(ordered: list[float], removed: list[float]) -> float | None:
    """The median of `ordered` (sorted) less the values in `removed` (each one of them).

    Exact, in O(k log n) for k removed values: a fleet of 1,000 eight-GPU hosts has 8,000
    figures per series, and sorting them again for every host would be a million sorts.
    """
    positions: list[int] = []
    for value in sorted(removed):
        start = bisect.bisect_left(ordered, value)
        if positions and positions[-1] >= start:
            start = positions[-1] + 1
        positions.append(start)
    size = len(ordered) - len(positions)
    if size <= 0:
        return None

    def rank(r: int) -> float:
        index = r
        for position in positions:
            if position <= index:
                index += 1
        return ordered[index]

    if size % 2:
        return rank(size // 2)
    return (rank(size // 2 - 1) + rank(size // 2)) / 2


def _series_outliers(figures: list[Figure], *, fail_only: bool = False) -> list[Outlier]:
    """Each host's figures in one series against the median and MAD of the other hosts'.

    `fail_only`: a pair of hosts, where only a gap of `FAIL_GAP` or more says which is wrong.
    """
    ordered = sorted(f.value for f in figures)
    by_host: dict[str, list[Figure]] = defaultdict(list)
    for figure in figures:
        by_host[figure.host].append(figure)
    deviations: dict[float, list[float]] = {}
    outliers: list[Outlier] = []
    for own in by_host.values():
        values = [f.value for f in own]
        reference = median_without(ordered, values)
        if reference is None:
            continue
        if reference not in deviations:
            deviations[reference] = sorted(abs(v - reference) for v in ordered)
        mad = median_without(deviations[reference], [abs(v - reference) for v in values])
        outliers.extend(replace(o, pair=fail_only) for f in own
                        if (o := is_outlier(f, reference, mad or 0.0)) is not None
                        and (o.level == "fail" or not fail_only))
    return outliers


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
        for name, figures in sorted(series.items()):
            holders = len({f.host for f in figures})
            if holders < MIN_GROUP:
                stats.append(SeriesStats(group, name, holders, None, None, None, None))
                if holders == 2:
                    outliers.extend(_series_outliers(figures, fail_only=True))
                continue
            if holders == MIN_GROUP:
                outliers.extend(_trio_outliers(figures))
            else:
                outliers.extend(_series_outliers(figures))
            values = [f.value for f in figures]
            median = statistics.median(values)
            mad = statistics.median(abs(v - median) for v in values)
            low, high = bounds(median, mad)
            fail = median * (1 - FAIL_GAP) if figures[0].higher_is_better else \
                median * (1 + FAIL_GAP)
            stats.append(SeriesStats(group, name, holders, median, mad, low, high, fail))
    return stats, outliers, small


def _trio_outliers(figures: list[Figure]) -> list[Outlier]:
    """Three hosts: the statistics, and each figure against the best of the other two.

    The median of two others is their mean: one more slow host drags it halfway down, and
    [100, 60, 60] would pass both 60s that the pair [100, 60] fails. So, as in a pair (a
    healthy machine does not run faster than healthy), a figure `FAIL_GAP` or more worse
    than the better of the other two hosts' (their median, for a figure per GPU) fails.
    """
    found = {id(o.figure): o for o in _series_outliers(figures)}
    by_host: dict[str, list[Figure]] = defaultdict(list)
    for figure in figures:
        by_host[figure.host].append(figure)
    medians = {host: statistics.median(f.value for f in own) for host, own in by_host.items()}
    for host, own in by_host.items():
        others = [h for h in medians if h != host]
        for figure in own:
            peer = (max if figure.higher_is_better else min)(others, key=lambda h: medians[h])
            outlier = is_outlier(figure, medians[peer], 0.0)
            if outlier is not None and outlier.level == "fail" and \
                    getattr(found.get(id(figure)), "level", None) != "fail":
                found[id(figure)] = replace(outlier, peer=peer)
    return list(found.values())
