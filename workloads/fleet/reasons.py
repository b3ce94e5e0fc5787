"""One cause, one line: many rows that say the same thing about a host become one reason.

A GPU that runs 30 % slow is slow in every check it takes part in; listing each row makes a
person read seven lines to learn one fact. Here the figures of a host that stand out at one
level (against its group, its own baseline, or the datasheet) are folded into one line that
names the devices and the range of the gaps ("GPU 3: 29–31 % below its group on all 7
checks"). The rows behind each line stay with it as `evidence` (a click away in the HTML
report, listed in the JSON).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from workloads.fleet.model import Figure, Host, Outlier, Reason


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
    by_level: dict[str, list[Finding]] = defaultdict(list)
    for item in found:
        by_level[item.level].append(item)
    reasons = []
    for level in ("fail", "warn"):
        items = by_level.get(level, [])
        if len(items) == 1:
            reasons.append(Reason(level, single[id(items[0])]))
        elif items:
            devices = sorted({i.device for i in items}, key=_device_order)
            total = sum(checks[d] for d in devices)
            on = f"all {total} checks" if len(items) >= total else f"{len(items)} of {total} checks"
            reasons.append(Reason(level, f"{device_list(devices)}: "
                                         f"{_percent_range([i.gap for i in items])} below "
                                         f"{against} on {on}",
                                  tuple(i.row for i in sorted(
                                      items, key=lambda i: (_device_order(i.device), i.row)))))
    return reasons


def outlier_reasons(host: Host, outliers: list[Outlier]) -> list[Reason]:
    """The host's outlying figures: one line per level."""
    found = [Finding(o.figure.device, o.gap, o.level, o.reason()) for o in outliers]
    single = {id(f): f"outlier in its group: {f.row}" for f in found}
    return fold(host, found, single, "its group")


def datasheet_reasons(figures: list[Figure]) -> list[Reason]:
    """The battery's own warn and fail verdicts of the host's figures, one line per level."""
    by_level: dict[str, list[Figure]] = defaultdict(list)
    for figure in figures:
        if figure.verdict in ("warn", "fail"):
            by_level[figure.verdict].append(figure)
    reasons = []
    for level in ("fail", "warn"):
        found = sorted(by_level.get(level, []), key=lambda f: (_device_order(f.device), f.check))
        texts = [f"{f'{f.device} ' if f.device else ''}{f.check}: "
                 f"{f.reason or f'{f.value:.4g} {f.unit}'}" for f in found]
        if len(found) == 1:
            reasons.append(Reason(level, texts[0]))
        elif found:
            devices = sorted({f.device for f in found}, key=_device_order)
            names = sorted({f.check for f in found})
            checks = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                             else "")
            reasons.append(Reason(level, f"{device_list(devices)}: {len(found)} figures {level} "
                                         f"against the datasheet ({checks})", tuple(texts)))
    return reasons


def _device_order(device: str | None) -> tuple[int, int, str]:
    if device is None:
        return (2, 0, "")
    tail = device.split()[-1]
    return (0, int(tail), device) if tail.isdigit() else (1, 0, device)
