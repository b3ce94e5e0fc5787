"""Each host's figures over time: every run under `results/acceptance/`, and its baseline.

`accept.yml` leaves one directory per run (`<dir>/<run>/<host>.json`) and the hosts'
accepted records in `<dir>/baselines/`. Here they become, per host, one row per figure and
one column per run, with the baseline beside them and the last run's change against it: a
host drifting away from its own accepted figures shows as a column of falling numbers even
where each run, judged alone, passed. A per-GPU figure is shown as the host's worst GPU
(the one a job waits for); the fleet report names the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from workloads.errors import WorkloadError
from workloads.fleet.baselines import DRIFT_WARN, load_baselines
from workloads.fleet.load import load_fleet
from workloads.fleet.model import Figure, Host
from workloads.fleet.outliers import FAIL_GAP
from workloads.fleet.verdict import judge

BASELINES = "baselines"


@dataclass
class Run:
    """One run directory: its name, when it started, and its hosts' verdicts."""

    name: str
    started: str
    hosts: dict[str, Host]
    verdicts: dict[str, str]


@dataclass
class HostHistory:
    """One host's figures per run (None where the run had no such figure) and its baseline."""

    host: str
    group: str
    baseline_started: str | None
    series: dict[str, list[float | None]] = field(default_factory=dict)
    baseline: dict[str, float | None] = field(default_factory=dict)
    verdicts: list[str | None] = field(default_factory=list)

    def change(self, name: str) -> float | None:
        """The last run's figure against the baseline, as a share (negative: below it)."""
        last = next((v for v in reversed(self.series[name]) if v is not None), None)
        base = self.baseline.get(name)
        if last is None or base is None or not base > 0:
            return None
        return (last - base) / base

    def level(self, name: str) -> str:
        change = self.change(name)
        if change is None or change > -DRIFT_WARN:
            return ""
        return "fail" if change <= -FAIL_GAP else "warn"


def series_name(figure: Figure) -> str:
    return f"{figure.check} (worst GPU)" if figure.device is not None else figure.check


def _by_series(host: Host) -> dict[str, float]:
    """A host's figures, per-GPU ones as the worst GPU's."""
    out: dict[str, float] = {}
    for figure in host.figures:
        name = series_name(figure)
        worse = min if figure.higher_is_better else max
        out[name] = worse(out[name], figure.value) if name in out else figure.value
    return out


def load_runs(directory: Path) -> tuple[list[Run], dict[str, Host]]:
    """Every run under `directory` (oldest first) and the hosts' baselines."""
    if not directory.is_dir():
        raise WorkloadError(f"{directory} is not a directory",
                            "give the directory that holds the runs (results/acceptance)")
    if any(directory.glob("*.json")):
        raise WorkloadError(f"{directory} holds records itself: it is one run",
                            f"give the directory above it ({directory.resolve().parent}), "
                            "which holds the runs")
    baselines = load_baselines(directory / BASELINES)
    runs = []
    for path in sorted(p for p in directory.iterdir()
                       if p.is_dir() and p.name != BASELINES and not p.name.startswith(".")
                       and any(p.glob("*.json"))):
        hosts = load_fleet(path)
        fleet = judge(hosts, baselines)
        started = min((h.started_at for h in hosts if h.started_at), default="")
        runs.append(Run(path.name, started, {h.name: h for h in hosts},
                        {v.host: v.verdict for v in fleet.verdicts}))
    if not runs:
        raise WorkloadError(f"{directory} holds no runs (directories of <host>.json records)",
                            "run ansible-playbook accept.yml first, or give results/acceptance")
    runs.sort(key=lambda r: (r.started, r.name))
    return runs, baselines


def host_histories(runs: list[Run], baselines: dict[str, Host]) -> list[HostHistory]:
    """Per host, its figures in every run, its baseline's, and its verdicts."""
    names = sorted({name for run in runs for name in run.hosts})
    out = []
    for name in names:
        latest = next(run.hosts[name] for run in reversed(runs) if name in run.hosts)
        baseline = baselines.get(name)
        history = HostHistory(name, latest.group,
                              baseline.started_at if baseline is not None else None)
        per_run = [_by_series(run.hosts[name]) if name in run.hosts else {} for run in runs]
        base = _by_series(baseline) if baseline is not None else {}
        for series in sorted({s for figures in per_run for s in figures} | set(base)):
            history.series[series] = [figures.get(series) for figures in per_run]
            history.baseline[series] = base.get(series)
        history.verdicts = [run.verdicts.get(name) for run in runs]
        out.append(history)
    return out
