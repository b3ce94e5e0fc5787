"""Each host against its own accepted record: the drift its siblings cannot show.

A fleet whose hosts all lose 6 % together (a driver, a firmware, a cooling change) looks
healthy against its own median; a host that degrades slowly (rows remapped, a spare link in
use: the redundancy that SuperBench found hides gradual degradation) passes every one-off
run. So the first record with which a host passes becomes its baseline, kept in a
`baselines/` directory beside the runs (`results/acceptance/baselines/<host>.json`, the
record as it was fetched), and every later run compares the host with it as well as with
its siblings:

* a figure `DRIFT_WARN` (5 %) or more below its baseline warns (SuperBench's example rule
  flags a node 5 % below its baseline; run-to-run noise is 1-2 %), `FAIL_GAP` (30 %) or more
  fails, as against the siblings; one line per device;
* fewer GPUs or fewer NVLinks up than the baseline fails (`completeness` names it with the
  group's comparisons), which also covers a host that has no siblings to compare with.

A baseline is kept until it is renewed on purpose (`--renew-baselines`: the records of the
hosts that pass replace theirs; or delete the file): replacing it with every passing run
would let a host drift 4 % a month forever. A baseline of other hardware (the GPUs were
swapped for another model) is not compared with, and is replaced when the host passes.
"""

from __future__ import annotations

import re
from pathlib import Path

from workloads.bounded import BadInput, read_capped
from workloads.fleet.load import MAX_RECORD_BYTES, load_fleet
from workloads.fleet.model import Figure, FleetVerdict, Host, Reason
from workloads.fleet.outliers import FAIL_GAP
from workloads.fleet.reasons import Finding, fold
from workloads.records import atomic_write_bytes

DRIFT_WARN = 0.05
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}")


def load_baselines(directory: Path | None) -> dict[str, Host]:
    """The baselines in `directory` by host name; none where it is absent or empty."""
    if directory is None or not directory.is_dir() or not any(directory.glob("*.json")):
        return {}
    return {host.name: host for host in load_fleet(directory) if host.ran}


def figure_key(figure: Figure) -> tuple[str, str]:
    return (figure.check, figure.device or figure.scope)


def drift(host: Host, baseline: Host) -> list[tuple[Figure, Figure, float]]:
    """(now, then, drop) for every figure of `host` that is worse than its baseline's."""
    then = {figure_key(f): f for f in baseline.figures}
    out = []
    for figure in host.figures:
        old = then.get(figure_key(figure))
        if old is None or not old.value > 0:
            continue
        worse = (old.value - figure.value) if figure.higher_is_better else \
            (figure.value - old.value)
        out.append((figure, old, worse / old.value))
    return out


def since(baseline: Host) -> str:
    """How a reason names the baseline: "its baseline of 2026-11-25T00:00:00Z"."""
    return f"its baseline of {baseline.started_at}" if baseline.started_at else "its baseline"


def comparable(host: Host, baseline: Host | None) -> Host | None:
    """The baseline, where it is of the host's hardware (a swapped GPU model is not)."""
    return baseline if baseline is not None and baseline.group == host.group else None


def baseline_reasons(host: Host, baseline: Host | None) -> list[Reason]:
    """Figures of the host 5 % or more below its own accepted record, one line per level.

    Fewer GPUs or NVLinks than the baseline are named with the group's comparisons
    (`completeness`), so that one missing GPU is one line whatever it is missing against.
    """
    baseline = comparable(host, baseline)
    if baseline is None:
        return []
    found: list[Finding] = []
    single: dict[int, str] = {}
    for now, then, drop in drift(host, baseline):
        if drop < DRIFT_WARN:
            continue
        row = (f"{f'{now.device} ' if now.device else ''}{now.check}: {now.value:.4g} "
               f"{now.unit}, {drop:.0%} below {then.value:.4g}")
        item = Finding(now.device, drop, "fail" if drop >= FAIL_GAP else "warn", row)
        found.append(item)
        single[id(item)] = f"{row} of {since(baseline)}"
    return fold(host, found, single, since(baseline))


def write_baselines(fleet: FleetVerdict, run: Path, directory: Path,
                    renew: bool = False) -> list[Path]:
    """Make the records of the hosts that passed their baselines, where they have none yet.

    With `renew`, every passing host's record replaces its baseline. A record is copied as
    it was fetched (bounded, never through a link); a host name that is not a plain file
    name is left alone.
    """
    current = load_baselines(directory)
    written = []
    for verdict in fleet.verdicts:
        if verdict.verdict != "pass" or not SAFE_NAME.fullmatch(verdict.host):
            continue
        old = current.get(verdict.host)
        if old is not None and old.group == verdict.group and not renew:
            continue
        data = _read_record(run / f"{verdict.host}.json")
        if data is None:
            continue
        target = directory / f"{verdict.host}.json"
        atomic_write_bytes(target, data)
        written.append(target)
    return written


def _read_record(path: Path) -> bytes | None:
    """The record's bytes, if it is a regular file (not a link) within the size bound."""
    try:
        return read_capped(path, MAX_RECORD_BYTES)  # no link followed, never blocks on a FIFO
    except (OSError, BadInput):
        return None
