"""What a host lacks: GPUs, NVLinks, rows its siblings have. Each is a `fail`, named.

The fleet step exists to catch the faults a host cannot see in itself: a GPU fallen off the
bus leaves a record that is complete for seven GPUs; a link down leaves an NVLink row with
one link fewer; a check that crashed leaves no row at all. Compared with nothing, each looks
healthy. Compared with the host's group (same GPU model) or with the inventory's declared
GPU count, each is a `fail` with one line that names it:

* fewer GPUs than the inventory declares (`acceptance_expected_gpus`), or, where it declares
  nothing, than most of the group's hosts have ("7 GPUs where its group has 8"); a host that
  sees no GPU in a run whose other hosts have them;
* a GPU with fewer NVLinks up than its board has (where the battery judged the links) or
  than its group's GPUs have ("NVLink: 17 of 18 links up on GPU 3");
* a row (check and item) that at least half of its group has and it lacks, or holds without
  a figure ("no allreduce figure"), and a per-GPU row that its other GPUs have and one lacks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from workloads.fleet.load import PERFORMANCE_CHECKS
from workloads.fleet.model import Host, Link, Reason

CHECK_NAMES = {"allreduce": "all-reduce", "membw": "memory bandwidth", "nvml": "NVML",
               "dcgm": "DCGM", "host": "other-load"}


def _gpus(count: int) -> str:
    return f"{count} GPU{'' if count == 1 else 's'}"


def device_list(devices: list[str]) -> str:
    """ "GPU 3", "GPUs 0, 2", "GPUs 0–7": GPU labels compressed into ranges."""
    numbers = sorted({int(d.split()[-1]) for d in devices if d.split()[-1].isdigit()})
    others = sorted(d for d in devices if not d.split()[-1].isdigit())
    if len(numbers) + len(others) == 1:
        return devices[0]
    runs: list[str] = []
    for n in numbers:
        if runs and runs[-1].split("–")[-1] == str(n - 1):
            runs[-1] = f"{runs[-1].split('–')[0]}–{n}"
        else:
            runs.append(str(n))
    return "GPUs " + ", ".join(runs + others)


def _majority(counts: list[int]) -> int:
    """The most common value; a tie goes to the larger (fail closed: fewer is the fault)."""
    tally = Counter(counts)
    return max(tally, key=lambda value: (tally[value], value))


def gpu_count_reasons(host: Host, group: list[Host], fleet_gpu_hosts: int) -> list[Reason]:
    """Fewer GPUs than the inventory declares, or than the group's majority."""
    if host.expected_gpus is not None:
        if host.gpus < host.expected_gpus:
            return [Reason("fail", f"{_gpus(host.gpus)} where the inventory declares "
                                   f"{host.expected_gpus}")]
        if host.gpus > host.expected_gpus:
            return [Reason("warn", f"{_gpus(host.gpus)} where the inventory declares "
                                   f"{host.expected_gpus}: correct acceptance_expected_gpus")]
        return []
    if host.gpus == 0:
        others = fleet_gpu_hosts
        if others:
            return [Reason("fail", f"no GPU visible, where {others} other host"
                                   f"{'' if others == 1 else 's'} of this run have GPUs (a host "
                                   "without GPUs: declare acceptance_expected_gpus: 0)")]
        return []
    if len(group) < 2:
        return []
    majority = _majority([h.gpus for h in group])
    if host.gpus < majority:
        return [Reason("fail", f"{_gpus(host.gpus)} where its group has {majority}",
                       (f"{sum(1 for h in group if h.gpus == majority)} of the group's "
                        f"{len(group)} hosts have {majority}; this host's record lists "
                        f"{_gpus(host.gpus)}",))]
    return []


def link_reasons(host: Host, group: list[Host]) -> list[Reason]:
    """GPUs with fewer NVLinks up than their board has, or than the group's GPUs have.

    The board's count counts where the battery judged the links; where it did not (one
    visible GPU, a board it has no reference for), the group's usual count still does.
    """
    peers = [link.active for h in group for link in h.links]
    usual = _majority(peers) if len({h.name for h in group if h.links}) >= 2 else None
    short: dict[tuple[int, int | None], list[Link]] = defaultdict(list)
    for link in host.links:
        below_board = link.judged and link.board is not None and link.active < link.board
        below_group = usual is not None and link.active < usual
        if below_board or below_group:
            board = link.board if link.board is not None and link.active < link.board else None
            short[(link.active, board)].append(link)
    reasons = []
    for (active, board), links in short.items():
        where = device_list([link.device for link in links])
        reasons.append(Reason("fail", f"NVLink: {active} of {board} links up on {where}"
                              if board is not None else
                              f"NVLink: {active} links up on {where} where its group's GPUs "
                              f"have {usual}"))
    return reasons


def _check_of(key: str) -> str:
    return key.split(" ", 1)[0]


def _item_of(key: str) -> str:
    return key.split(" ", 1)[1] if " " in key else ""


def _name(check: str) -> str:
    return CHECK_NAMES.get(check, check)


def missing_row_reasons(host: Host, group: list[Host]) -> list[Reason]:
    """Rows (check and item) that at least half the group has, and this host lacks.

    Per check, one line: "no all-reduce figure" when the host has none of the check's rows
    (or none with a figure), "no matmul bfloat16 8192² figure" when it lacks some; then the
    checks the battery was asked to run that left no row and no sibling shows; then per-GPU
    rows one of the host's GPUs lacks.
    """
    lacking: dict[str, list[tuple[str, str]]] = defaultdict(list)  # check -> (item, evidence)
    holders = Counter(key for h in group for key in h.rows)
    if len(group) >= 2:
        figure_holders = Counter(key for h in group for key in h.figure_keys)
        for key, count in sorted(holders.items()):
            needs_figure = figure_holders[key] * 2 >= len(group)
            if key not in host.rows and count * 2 >= len(group):
                lacking[_check_of(key)].append(
                    (_item_of(key), f"{key}: no row; {count} of the group's {len(group)} hosts "
                                    "have one"))
            elif key in host.rows and key not in host.figure_keys and needs_figure:
                lacking[_check_of(key)].append(
                    (_item_of(key), f"{key}: no figure ({host.row_notes.get(key, '')}); "
                                    f"{figure_holders[key]} of the group's {len(group)} hosts "
                                    "have one"))
    reasons = []
    for check, items in lacking.items():
        noun = "figure" if check in PERFORMANCE_CHECKS else "row"
        expected = sum(1 for key, count in holders.items()
                       if _check_of(key) == check and count * 2 >= len(group))
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


def _per_gpu_keys(group: list[Host]) -> set[str]:
    """Rows the group's hosts hold on several GPUs each (not, say, training on GPU 0 alone)."""
    several: Counter[str] = Counter()
    holding: Counter[str] = Counter()
    for h in group:
        for key, devices in h.rows.items():
            on_gpus = sum(1 for d in devices if d in h.gpu_devices)
            if on_gpus:
                holding[key] += 1
                several[key] += on_gpus >= 2
    return {key for key, count in holding.items() if several[key] * 2 > count}


def _missing_on_gpus(host: Host, group: list[Host]) -> list[Reason]:
    """Per-GPU rows that some of the host's GPUs have and others lack."""
    gaps: dict[str, list[str]] = defaultdict(list)
    for key in sorted(_per_gpu_keys(group) & set(host.rows)):
        devices = host.rows[key]
        if not any(d in host.gpu_devices for d in devices):
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


def completeness(hosts: list[Host]) -> dict[str, list[Reason]]:
    """Every host's record defects and missing GPUs, links and rows (group and inventory).

    A record the battery did not finish (or that holds nothing) lacks rows because of that
    one cause: its missing rows become the evidence of the record's own reason, not lines
    of their own.
    """
    groups: dict[str, list[Host]] = defaultdict(list)
    for host in hosts:
        if host.ran:
            groups[host.group].append(host)
    gpu_hosts = sum(1 for h in hosts if h.ran and h.gpus > 0)
    out: dict[str, list[Reason]] = {}
    for host in hosts:
        if not host.ran:
            continue
        group = groups[host.group]
        hardware = [*gpu_count_reasons(host, group, gpu_hosts - (host.gpus > 0)),
                    *link_reasons(host, group)]
        rows = missing_row_reasons(host, group)
        problems = list(host.problems)
        if host.partial and problems:
            folded = tuple(line for r in rows for line in (r.text, *r.evidence))
            problems[0] = replace(problems[0], evidence=problems[0].evidence + folded)
            rows = []
        out[host.name] = [*problems, *hardware, *rows]
    return out
