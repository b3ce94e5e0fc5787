"""Host verdicts: `fail` against the hardware, the record or the group, `warn` against the group.

A host is `fail` when the inventory expects it and it has no record, when its record cannot
be read, when its battery did not run or left a partial record, when one of its GPUs is of
another model than its others or shares its UUID with another GPU (`identity`), when it
lacks a GPU, an NVLink or a row its group has (`completeness`), when a check failed against
its hardware's limit (the battery's own verdict), or when a figure is 30 % or more below
the other hosts of its group (in a group of two: the other host; of three: also the better
of the other two) or its own baseline;
`warn` when a check warned or a figure is an outlier by less, or 5 % or more below its own
baseline (`baselines`); `pass` otherwise.
Every reason is one line per cause that names the device and the figure, so the report can
be acted on without opening the record.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from workloads.fleet.baselines import baseline_reasons
from workloads.fleet.completeness import completeness
from workloads.fleet.identity import duplicate_uuid_reasons, settle_ties
from workloads.fleet.model import (
    VERDICT_ORDER,
    FleetVerdict,
    Host,
    HostVerdict,
    Outlier,
    Reason,
    worst,
)
from workloads.fleet.outliers import MIN_GROUP, group_statistics
from workloads.fleet.reasons import datasheet_reasons, merge_by_device, outlier_reasons


def judge(hosts: list[Host], baselines: dict[str, Host] | None = None) -> FleetVerdict:
    """The fleet's verdict: every host's, with the reasons, the statistics and a note.

    `baselines` (host name to its accepted record) adds each host's drift from its own.
    """
    hosts = settle_ties(hosts)
    stats, outliers, small = group_statistics(hosts)
    by_host: dict[str, list[Outlier]] = defaultdict(list)
    for outlier in outliers:
        by_host[outlier.figure.host].append(outlier)
    missing = completeness(hosts, baselines)
    twice = duplicate_uuid_reasons([h for h in hosts if h.ran])
    verdicts = []
    for host in sorted(hosts, key=lambda h: h.name):
        if not host.ran:
            verdicts.append(HostVerdict(host.name, host.group, "fail",
                                        [str(host.error)], [[]]))
            continue
        figures = merge_by_device([
            *datasheet_reasons(host.figures),
            *outlier_reasons(host, by_host.get(host.name, [])),
            *baseline_reasons(host, (baselines or {}).get(host.name))])
        reasons: list[Reason] = [*missing.get(host.name, []), *twice.get(host.name, []),
                                 *figures,
                                 *(Reason(level, text) for level, text in host.findings)]
        reasons.sort(key=lambda r: -VERDICT_ORDER.get(r.level, 0))
        verdicts.append(HostVerdict(host.name, host.group, worst([r.level for r in reasons]),
                                    [r.line() for r in reasons],
                                    [list(r.evidence) for r in reasons]))
    return FleetVerdict(hosts=hosts, verdicts=verdicts, stats=stats, outliers=outliers,
                        small_groups=small, note=alone_note(hosts))


def alone_note(hosts: list[Host]) -> str | None:
    """What the report must say first when no host could be compared with siblings' figures."""
    sizes = Counter(h.group for h in hosts if h.ran)
    if not sizes or max(sizes.values()) >= MIN_GROUP:
        return None
    if max(sizes.values()) == 1:
        return (f"Every host stands alone: {sum(sizes.values())} host(s), each the only one of "
                "its hardware. No figure is compared with a sibling's; each verdict is the "
                "host's record against its datasheet (and the inventory's GPU count, where "
                "declared).")
    return (f"No hardware group has {MIN_GROUP} or more hosts: no outlier statistics. In a "
            "group of two each figure 30 % or more worse than the other host's fails; missing "
            "GPUs, NVLinks and rows are still compared within each group, and each figure "
            "against its datasheet.")


def small_group_note(group: str, size: int) -> str:
    if size == 2:
        return (f"group {group} has 2 hosts: too few for outlier statistics; a figure 30 % or "
                "more worse than the other host's fails, and each is judged by its records "
                "and the datasheet")
    return (f"group {group} has {size} host{'s' if size != 1 else ''}, fewer than {MIN_GROUP}: "
            "too small for statistics, judged by its records and the datasheet alone")
