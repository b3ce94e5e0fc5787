"""What a host lacks: GPUs, NVLinks, rows its siblings have. Each is a `fail`, named.

The fleet step exists to catch the faults a host cannot see in itself: a GPU fallen off the
bus leaves a record that is complete for seven GPUs; a link down leaves an NVLink row with
one link fewer; a check that crashed leaves no row at all. Compared with nothing, each looks
healthy. Compared with the host's group (same GPU model) or with the inventory's declared
GPU count, each is a `fail` with one line that names it:

* fewer GPUs than the inventory declares (`acceptance_expected_gpus`), or, where it declares
  nothing, than most of the group's hosts have ("7 GPUs where its group has 8") or its own
  baseline has; a host that sees no GPU in a run whose other hosts have them;
* a GPU with fewer NVLinks up than its board has (where the battery judged the links), than
  its group's GPUs have, or than its own baseline ("NVLink: 17 of 18 links up on GPU 3");
* a row (check and item) that at least half of its group has and it lacks, or holds without
  a figure ("no allreduce figure"), and a per-GPU row that its other GPUs have and one lacks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, replace

from workloads.fleet.baselines import comparable, since
from workloads.fleet.load import PERFORMANCE_CHECKS, ranked_key
from workloads.fleet.model import Host, Link, Reason
from workloads.fleet.reasons import device_list

CHECK_NAMES = {"allreduce": "all-reduce", "membw": "memory bandwidth", "nvml": "NVML",
               "dcgm": "DCGM", "host": "other-load"}


def _gpus(count: int) -> str:
    return f"{count} GPU{'' if count == 1 else 's'}"


def _majority(counts: list[int]) -> int:
    """The most common value; a tie goes to the larger (fail closed: fewer is the fault)."""
    tally = Counter(counts)
    return max(tally, key=lambda value: (tally[value], value))


@dataclass
class Group:
    """What a group's hosts usually have, counted once (not once per host: a fleet of 1,000
    hosts would count a million times)."""

    hosts: list[Host]
    gpus: int | None  # the majority's GPU count
    links: int | None  # the usual NVLinks up per GPU, where two hosts or more have links
    holders: Counter[str]  # row key: hosts holding it (rows every healthy host has)
    figure_holders: Counter[str]  # row key: hosts holding it with a figure
    per_gpu: set[str]  # row keys the group's hosts hold on several GPUs each

    @classmethod
    def of(cls, hosts: list[Host]) -> Group:
        """The group's facts. A row that no host holds but to report a problem (an XID event,
        a slow GPU pair: the battery writes those only when they happen) is nobody's due."""
        peers = [link.active for h in hosts for link in h.links]
        holders = Counter(key for h in hosts for key in h.rows)
        healthy = Counter(key for h in hosts for key in h.rows if key not in h.problem_rows)
        due = Counter({key: count for key, count in holders.items()
                       if healthy[key] or ranked_key(key)})
        return cls(hosts=hosts, gpus=_majority([h.gpus for h in hosts]) if hosts else None,
                   links=_majority(peers) if sum(1 for h in hosts if h.links) >= 2 else None,
                   holders=due,
                   figure_holders=Counter(key for h in hosts for key in h.figure_keys
                                          if key in due),
                   per_gpu=_per_gpu_keys(hosts) & set(due))

    @property
    def size(self) -> int:
        return len(self.hosts)


def gpu_count_reasons(host: Host, group: Group, fleet_gpu_hosts: int,
                      baseline: Host | None = None) -> list[Reason]:
    """Fewer GPUs than the inventory declares, or than the group's majority or its baseline."""
    if host.expected_gpus is not None:
        if host.gpus < host.expected_gpus:
            return [Reason("fail", f"{_gpus(host.gpus)} where the inventory declares "
                                   f"{host.expected_gpus}")]
        if host.gpus > host.expected_gpus:
            return [Reason("warn", f"{_gpus(host.gpus)} where the inventory declares "
                                   f"{host.expected_gpus}: correct acceptance_expected_gpus")]
        return []
    if host.gpus == 0 and fleet_gpu_hosts:
        return [Reason("fail", f"no GPU visible, where {fleet_gpu_hosts} other host"
                               f"{'' if fleet_gpu_hosts == 1 else 's'} of this run have GPUs (a "
                               "host without GPUs: declare acceptance_expected_gpus: 0)")]
    majority = group.gpus
    if group.size >= 2 and majority is not None and host.gpus < majority:
        return [Reason("fail", f"{_gpus(host.gpus)} where its group has {majority}",
                       (f"{sum(1 for h in group.hosts if h.gpus == majority)} of the group's "
                        f"{group.size} hosts have {majority}; this host's record lists "
                        f"{_gpus(host.gpus)}",))]
    if baseline is not None and host.gpus < baseline.gpus:
        return [Reason("fail", f"{_gpus(host.gpus)} where {since(baseline)} has "
                               f"{baseline.gpus}")]
    return []


def link_reasons(host: Host, group: Group, baseline: Host | None = None) -> list[Reason]:
    """GPUs with fewer NVLinks up than their board, the group's GPUs, or the baseline has.

    The board's count counts where the battery judged the links; where it did not (one
    visible GPU, a board it has no reference for), the group's usual count and the host's
    own baseline still do. Each shortfall is one line, against the first reference it
    falls short of.
    """
    usual = group.links
    before = {link.device: link.active for link in baseline.links} if baseline else {}
    short: dict[tuple[str, str], list[Link]] = defaultdict(list)  # (count, against): links
    for link in host.links:
        board = f" of {link.board}" if link.board is not None else ""
        if link.judged and link.board is not None and link.active < link.board:
            short[(f"{link.active}{board}", "")].append(link)
        elif usual is not None and link.active < usual:
            against = "" if link.board == usual else f" where its group's GPUs have {usual}"
            short[(f"{link.active}{board}", against)].append(link)
        elif baseline is not None and link.active < before.get(link.device, 0):
            short[(f"{link.active}", f" where {since(baseline)} has "
                                     f"{before[link.device]}")].append(link)
    return [Reason("fail", f"NVLink: {count} links up on "
                           f"{device_list([link.device for link in links])}{against}")
            for (count, against), links in short.items()]


def _check_of(key: str) -> str:
    return key.split(" ", 1)[0]


def _item_of(key: str) -> str:
    return key.split(" ", 1)[1] if " " in key else ""


def _name(check: str) -> str:
    return CHECK_NAMES.get(check, check)


def missing_row_reasons(host: Host, group: Group) -> list[Reason]:
    """Rows (check and item) that at least half the group has, and this host lacks.

    Per check, one line: "no all-reduce figure" when the host has none of the check's rows
    (or none with a figure), "no matmul bfloat16 8192² figure" when it lacks some; then the
    checks the battery was asked to run that left no row and no sibling shows; then per-GPU
    rows one of the host's GPUs lacks.
    """
    lacking: dict[str, list[tuple[str, str]]] = defaultdict(list)  # check -> (item, evidence)
    holders, size = group.holders, group.size
    if size >= 2:
        for key, count in sorted(holders.items()):
            with_figure = group.figure_holders[key]
            if key not in host.rows and count * 2 >= size:
                lacking[_check_of(key)].append(
                    (_item_of(key), f"{key}: no row; {count} of the group's {size} hosts "
                                    "have one"))
            elif key in host.rows and key not in host.figure_keys and with_figure * 2 >= size:
                lacking[_check_of(key)].append(
                    (_item_of(key), f"{key}: no figure ({host.row_notes.get(key, '')}); "
                                    f"{with_figure} of the group's {size} hosts have one"))
    reasons = []
    for check, items in lacking.items():
        noun = "figure" if check in PERFORMANCE_CHECKS else "row"
        expected = sum(1 for key, count in holders.items()
                       if _check_of(key) == check and count * 2 >= size)
        if len(items) >= expected:
            text = f"no {_name(check)} {noun}"
        elif len(items) == 1:
            text = f"no {_name(check)} {items[0][0]} {noun}"
        else:
            text = f"no {_name(check)} {noun}s for {', '.join(item for item, _ in items[:4])}" + \
                (f" and {len(items) - 4} more" if len(items) > 4 else "")
        reasons.append(Reason("fail", text, tuple(evidence for _, evidence in items)))
    present = {_check_of(key) for key in host.rows}
    unrun = [c for c in host.selected if c not in present and c not in lacking]
    if unrun:
        them = "it" if len(unrun) == 1 else "them"
        reasons.append(Reason("fail", f"no {', '.join(_name(c) for c in unrun)} rows, though the "
                                      f"battery was asked to run {them}"))
    return reasons + _missing_on_gpus(host, group)


def _per_gpu_keys(hosts: list[Host]) -> set[str]:
    """Rows the group's hosts hold on several GPUs each (not, say, training on GPU 0 alone)."""
    several: Counter[str] = Counter()
    holding: Counter[str] = Counter()
    for h in hosts:
        gpus = set(h.gpu_devices)
        for key, devices in h.rows.items():
            on_gpus = len(devices & gpus)
            if on_gpus:
                holding[key] += 1
                several[key] += on_gpus >= 2
    return {key for key, count in holding.items() if several[key] * 2 > count}


def _missing_on_gpus(host: Host, group: Group) -> list[Reason]:
    """Per-GPU rows that some of the host's GPUs have and others lack."""
    gaps: dict[str, list[str]] = defaultdict(list)
    gpus = set(host.gpu_devices)
    for key in sorted(group.per_gpu & set(host.rows)):
        devices = host.rows[key]
        if not devices & gpus:
            continue
        for device in host.gpu_devices:
            if device not in devices:
                gaps[device].append(key)
    reasons = []
    for device, keys in sorted(gaps.items(), key=lambda item: int(item[0].split()[-1])):
        shown = ", ".join(keys[:3]) + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        reasons.append(Reason("fail", f"{device}: no {shown} row{'s' if len(keys) > 1 else ''} "
                                      "where the host's other GPUs have "
                                      f"{'them' if len(keys) > 1 else 'one'}",
                              tuple(f"{device} {key}: no row" for key in keys)))
    return reasons


def completeness(hosts: list[Host],
                 baselines: dict[str, Host] | None = None) -> dict[str, list[Reason]]:
    """Every host's record defects and missing GPUs, links and rows (group and inventory).

    A record the battery did not finish (or that holds nothing) lacks rows because of that
    one cause: its missing rows become the evidence of the record's own reason, not lines
    of their own.
    """
    members: dict[str, list[Host]] = defaultdict(list)
    for host in hosts:
        if host.ran:
            members[host.group].append(host)
    groups = {name: Group.of(group) for name, group in members.items()}
    gpu_hosts = sum(1 for h in hosts if h.ran and h.gpus > 0)
    out: dict[str, list[Reason]] = {}
    for host in hosts:
        if not host.ran:
            continue
        group = groups[host.group]
        baseline = comparable(host, (baselines or {}).get(host.name))
        hardware = [*gpu_count_reasons(host, group, gpu_hosts - (host.gpus > 0), baseline),
                    *link_reasons(host, group, baseline)]
        rows = missing_row_reasons(host, group)
        problems = list(host.problems)
        if host.partial and problems:
            folded = tuple(line for r in rows for line in (r.text, *r.evidence))
            problems[0] = replace(problems[0], evidence=problems[0].evidence + folded)
            rows = []
        out[host.name] = [*problems, *hardware, *rows]
    return out
