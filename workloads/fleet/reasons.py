"""One cause, one line: many rows that say the same thing about a host become one reason.

A GPU that runs 30 % slow is slow in every check it takes part in; listing each row makes a
person read seven lines to learn one fact. Here the figures of a host that stand out at one
level (against its group, its own baseline, or the datasheet) are folded into one line that
names the devices and the range of the gaps ("GPU 3: 29–31 % below its group on all 7
checks"). The rows behind each line stay with it as `evidence` (a click away in the HTML
report, listed in the JSON).

The cause is the device, not the level: a GPU 30 % slow measures 28 % below on some checks
(a `warn` each) and 32 % on others (a `fail`) with ordinary noise, and that is one slow GPU,
not a failing one and a warning one. So each device's findings go to the line of their
worst level, whatever their split; devices of the same level share a line.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from workloads.fleet.model import Figure, Host, Outlier, Reason, worst

T = TypeVar("T")


@dataclass(frozen=True)
class Finding:
    """One figure that stands out: its device, the share it is off by, its level, its row."""

    device: str | None
    gap: float
    level: str
    row: str


def device_list(devices: list[str | None]) -> str:
    """ "GPU 3", "GPUs 0, 2", "GPUs 0–7", "GPUs 0–7 and the host": labels compressed."""
    named = [d for d in devices if d is not None]
    numbers = sorted({int(d.split()[-1]) for d in named if d.split()[-1].isdigit()})
    others = sorted({d for d in named if not d.split()[-1].isdigit()})
    runs: list[str] = []
    for n in numbers:
        if runs and runs[-1].split("–")[-1] == str(n - 1):
            runs[-1] = f"{runs[-1].split('–')[0]}–{n}"
        else:
            runs.append(str(n))
    parts = ([f"GPU{'s' if len(numbers) > 1 or '–' in ''.join(runs) else ''} " + ", ".join(runs)]
             if runs else []) + others
    if None in devices:
        parts.append("the host")
    return " and ".join(parts) if len(parts) <= 2 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _percent_range(gaps: list[float]) -> str:
    low, high = round(min(gaps) * 100), round(max(gaps) * 100)
    return f"{low} %" if low == high else f"{low}–{high} %"


def fold(host: Host, found: list[Finding], single: dict[int, str], against: str) -> list[Reason]:
    """One line per level: the one row as it is (`single[id]`), or the devices and the range.

    `against` says what the figures are below ("its group", "its baseline of ...").
    """
    checks: dict[str | None, int] = defaultdict(int)
    for figure in host.figures:
        checks[figure.device] += 1
    by_level = by_worst_level(found, lambda item: (item.device, item.level))
    reasons = []
    for level in ("fail", "warn"):
        items = by_level.get(level, [])
        if len(items) == 1:
            reasons.append(Reason(level, single[id(items[0])], (), (items[0].device,)))
        elif items:
            devices = sorted({i.device for i in items}, key=_device_order)
            total = sum(checks[d] for d in devices)
            on = f"all {total} checks" if len(items) >= total else f"{len(items)} of {total} checks"
            reasons.append(Reason(level, f"{device_list(devices)}: "
                                         f"{_percent_range([i.gap for i in items])} below "
                                         f"{against} on {on}",
                                  tuple(i.row for i in sorted(
                                      items, key=lambda i: (_device_order(i.device), i.row))),
                                  tuple(devices)))
    return reasons


def by_worst_level(items: list[T], device_level: Callable[[T], tuple[str | None, str]]
                   ) -> dict[str, list[T]]:
    """The items by the worst level of their device: one device, one level, one line."""
    levels: dict[str | None, str] = {}
    for item in items:
        device, level = device_level(item)
        levels[device] = worst([levels.get(device, "pass"), level])
    out: dict[str, list[T]] = defaultdict(list)
    for item in items:
        out[levels[device_level(item)[0]]].append(item)
    return out


def outlier_reasons(host: Host, outliers: list[Outlier]) -> list[Reason]:
    """The host's outlying figures: one line per level."""
    found = [Finding(o.figure.device, o.gap, o.level, o.reason()) for o in outliers]
    single = {id(f): f"outlier in its group: {f.row}" for f in found}
    against = {o.against for o in outliers}
    return fold(host, found, single, against.pop() if len(against) == 1 else "its group")


def datasheet_reasons(figures: list[Figure]) -> list[Reason]:
    """The battery's own warn and fail verdicts of the host's figures, one line per level."""
    by_level = by_worst_level([f for f in figures if f.verdict in ("warn", "fail")],
                              lambda figure: (figure.device, figure.verdict))
    reasons = []
    for level in ("fail", "warn"):
        found = sorted(by_level.get(level, []), key=lambda f: (_device_order(f.device), f.check))
        texts = [f"{f'{f.device} ' if f.device else ''}{f.check}: "
                 f"{f.reason or f'{f.value:.4g} {f.unit}'}" for f in found]
        if len(found) == 1:
            reasons.append(Reason(level, texts[0], (), (found[0].device,)))
        elif found:
            devices = sorted({f.device for f in found}, key=_device_order)
            names = sorted({f.check for f in found})
            checks = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                             else "")
            split = Counter(f.verdict for f in found)
            short = (f"{len(found)} figures {level}" if len(split) == 1 else
                     f"{len(found)} figures short ({split['fail']} fail, {split['warn']} warn)")
            reasons.append(Reason(level, f"{device_list(devices)}: {short} against the datasheet "
                                         f"({checks})", tuple(texts), tuple(devices)))
    return reasons


def _device_order(device: str | None) -> tuple[int, int, str]:
    if device is None:
        return (2, 0, "")
    tail = device.split()[-1]
    return (0, int(tail), device) if tail.isdigit() else (1, 0, device)


def merge_by_device(reasons: list[Reason]) -> list[Reason]:
    """Lines about the same device's figures, from several comparisons, as one line.

    A GPU 30 % slow is below the datasheet, below its group and below its baseline: three
    comparisons, one cause. Lines that share a device (`Reason.devices`) are joined into one
    at the worst of their levels, their texts in order and their evidence together; lines
    about other things (no `devices`) are left as they are.
    """
    merged: list[list[Reason]] = []
    for reason in reasons:
        if not reason.devices:
            merged.append([reason])
            continue
        hits = [group for group in merged
                if group[0].devices and any(set(reason.devices) & set(r.devices) for r in group)]
        for group in hits[1:]:  # this line joins groups that were apart until now
            hits[0].extend(group)
            merged.remove(group)
        if hits:
            hits[0].append(reason)
        else:
            merged.append([reason])
    out = []
    for group in merged:
        if len(group) == 1:
            out.append(group[0])
            continue
        devices = tuple(sorted({d for r in group for d in r.devices}, key=_device_order))
        out.append(Reason(worst([r.level for r in group]), "; ".join(r.text for r in group),
                          tuple(e for r in group for e in (r.evidence or (r.text,))), devices))
    return out
