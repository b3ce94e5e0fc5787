"""Host verdicts: `fail` against the hardware, `warn` against the group, with the reasons."""

from __future__ import annotations

from collections import defaultdict

from workloads.fleet.model import FleetVerdict, Host, HostVerdict, Outlier, worst
from workloads.fleet.outliers import MIN_GROUP, group_statistics


def judge(hosts: list[Host]) -> FleetVerdict:
    """The fleet's verdict.

    A host is `fail` when its battery could not run or any check failed against its
    hardware's limit; `warn` when a check warned against the limit or a figure is an
    outlier against its group; `pass` otherwise. Every reason names the check, the device
    and the figure, so the report can be acted on without opening the record.
    """
    stats, outliers, small = group_statistics(hosts)
    by_host: dict[str, list[Outlier]] = defaultdict(list)
    for outlier in outliers:
        by_host[outlier.figure.host].append(outlier)
    verdicts = []
    for host in sorted(hosts, key=lambda h: h.name):
        if not host.ran:
            verdicts.append(HostVerdict(host.name, host.group, "fail",
                                        [f"the battery did not run: {host.error}"]))
            continue
        levels: list[str] = []
        reasons: list[str] = []
        for figure in host.figures:
            if figure.verdict in ("warn", "fail"):
                levels.append(figure.verdict)
                where = f"{figure.device} " if figure.device is not None else ""
                reasons.append(f"{figure.verdict}: {where}{figure.check}: "
                               f"{figure.reason or f'{figure.value:.4g} {figure.unit}'}")
        for level, finding in host.findings:
            levels.append(level)
            reasons.append(f"{level}: {finding}")
        for outlier in by_host.get(host.name, []):
            levels.append("warn")
            reasons.append(f"warn: outlier in its group: {outlier.reason()}")
        verdicts.append(HostVerdict(host.name, host.group, worst(levels), reasons))
    return FleetVerdict(hosts=hosts, verdicts=verdicts, stats=stats, outliers=outliers,
                        small_groups=small)


def small_group_note(group: str, size: int) -> str:
    return (f"group {group} has {size} host{'s' if size != 1 else ''}, fewer than {MIN_GROUP}: "
            "too small for statistics, judged by the datasheet alone")
