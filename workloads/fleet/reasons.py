"""One cause, one line: many rows that say the same thing about a device become one reason.

A GPU that runs 30 % slow is slow in every check it takes part in; listing each row makes a
person read seven lines to learn one fact. Here the rows of one device (or of the host, for
host-wide figures) that stand out against their group are folded into one line with the
range of the gaps ("GPU 3: 29–31 % below its group on all 7 checks"), and the battery's own
datasheet verdicts of one device and level likewise. The rows behind each line stay with it
as `evidence` (a click away in the HTML report, listed in the JSON).
"""

from __future__ import annotations

from collections import defaultdict

from workloads.fleet.model import Figure, Host, Outlier, Reason, worst


def _where(device: str | None) -> str:
    return device if device is not None else "the host"


def _percent_range(gaps: list[float]) -> str:
    low, high = round(min(gaps) * 100), round(max(gaps) * 100)
    return f"{low} %" if low == high else f"{low}–{high} %"


def outlier_reasons(host: Host, outliers: list[Outlier]) -> list[Reason]:
    """The host's outlying figures, one line per device."""
    by_device: dict[str | None, list[Outlier]] = defaultdict(list)
    for outlier in outliers:
        by_device[outlier.figure.device].append(outlier)
    measured: dict[str | None, set[str]] = defaultdict(set)
    for figure in host.figures:
        measured[figure.device].add(figure.check)
    reasons = []
    for device, found in sorted(by_device.items(), key=lambda item: _device_order(item[0])):
        found.sort(key=lambda o: o.figure.check)
        level = worst([o.level for o in found])
        if len(found) == 1:
            reasons.append(Reason(level, f"outlier in its group: {found[0].reason()}"))
            continue
        side = "below" if all(o.figure.higher_is_better for o in found) else "worse than"
        total = len(measured[device])
        on = f"all {total} checks" if len(found) >= total else f"{len(found)} of {total} checks"
        reasons.append(Reason(level, f"{_where(device)}: {_percent_range([o.gap for o in found])} "
                                     f"{side} its group on {on}",
                              tuple(o.reason() for o in found)))
    return reasons


def datasheet_reasons(figures: list[Figure]) -> list[Reason]:
    """The battery's own warn and fail verdicts of the host's figures, one line per device."""
    by_key: dict[tuple[str | None, str], list[Figure]] = defaultdict(list)
    for figure in figures:
        if figure.verdict in ("warn", "fail"):
            by_key[(figure.device, figure.verdict)].append(figure)
    reasons = []
    for (device, level), found in sorted(by_key.items(),
                                         key=lambda item: (_device_order(item[0][0]), item[0][1])):
        where = f"{device} " if device is not None else ""
        texts = [f"{where}{f.check}: {f.reason or f'{f.value:.4g} {f.unit}'}" for f in found]
        if len(found) == 1:
            reasons.append(Reason(level, texts[0]))
            continue
        checks = ", ".join(f.check for f in found[:3]) + (
            f" and {len(found) - 3} more" if len(found) > 3 else "")
        reasons.append(Reason(level, f"{_where(device)}: {len(found)} figures {level} against "
                                     f"the datasheet ({checks})", tuple(texts)))
    return reasons


def _device_order(device: str | None) -> tuple[int, int, str]:
    if device is None:
        return (0, 0, "")
    tail = device.split()[-1]
    return (1, int(tail), device) if tail.isdigit() else (2, 0, device)
