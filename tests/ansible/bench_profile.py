"""What one ansible-playbook run cost, from tfhost_profile's JSON lines: summary, table, JSON.

Pure functions (no play, no container) so that tests/ansible/test_bench_profile.py can
check the table and the JSON on generated records. tests/ansible/bench.py runs the plays.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

STATUSES = ("ok", "changed", "skipped", "failed", "ignored", "unreachable")


class ProfileError(ValueError):
    """A profile line that is not what tfhost_profile writes."""


@dataclass(frozen=True)
class TaskCost:
    """One task summed over the hosts it ran on (a loop's items together)."""

    role: str
    task: str
    action: str
    seconds: float  # summed over hosts
    host_runs: int  # module executions on the hosts
    hosts: int
    statuses: dict[str, int]

    @property
    def label(self) -> str:
        # Ansible names a role's task "role : task" already; the play's own have no prefix.
        if not self.role or self.task.startswith(f"{self.role} : "):
            return self.task
        return f"{self.role} : {self.task}"


@dataclass(frozen=True)
class RunCost:
    """One ansible-playbook run: wall time, recap, controller cost and the per-task costs."""

    label: str  # "converge" or "re-run"
    hosts: int
    wall_seconds: float
    controller_cpu_seconds: float
    controller_peak_rss_mib: float
    returncode: int
    tasks: list[TaskCost] = field(default_factory=list)

    @property
    def host_runs(self) -> int:
        return sum(task.host_runs for task in self.tasks)

    @property
    def statuses(self) -> dict[str, int]:
        total = dict.fromkeys(STATUSES, 0)
        for task in self.tasks:
            for status, count in task.statuses.items():
                total[status] += count
        return total

    @property
    def seconds_per_host(self) -> float:
        return self.wall_seconds / self.hosts if self.hosts else 0.0


def parse_records(lines: Iterable[str]) -> list[dict[str, object]]:
    """The JSON objects of a tfhost_profile file; ProfileError names a malformed line."""
    records: list[dict[str, object]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise ProfileError(f"profile line {number} is not JSON ({error.msg})") from None
        missing = {"order", "host", "role", "task", "action", "status", "seconds",
                   "host_runs"} - set(record) if isinstance(record, dict) else {"all keys"}
        if missing:
            raise ProfileError(f"profile line {number} lacks {', '.join(sorted(missing))}")
        if record["status"] not in STATUSES:
            raise ProfileError(f"profile line {number} has status {record['status']!r}")
        records.append(record)
    return records


def task_costs(records: Sequence[dict[str, object]]) -> list[TaskCost]:
    """Records summed per task (role, name, action) in the order the play first ran them."""
    seconds: dict[tuple[str, str, str], float] = defaultdict(float)
    runs: dict[tuple[str, str, str], int] = defaultdict(int)
    hosts: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    statuses: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)
    first: dict[tuple[str, str, str], int] = {}
    for record in records:
        key = (str(record["role"]), str(record["task"]), str(record["action"]))
        seconds[key] += float(str(record["seconds"]))
        runs[key] += int(str(record["host_runs"]))
        hosts[key].add(str(record["host"]))
        status = str(record["status"])
        statuses[key][status] = statuses[key].get(status, 0) + 1
        first.setdefault(key, int(str(record["order"])))
    return [TaskCost(key[0], key[1], key[2], round(seconds[key], 4), runs[key], len(hosts[key]),
                     statuses[key]) for key in sorted(first, key=first.__getitem__)]


def role_seconds(run: RunCost) -> dict[str, float]:
    """Seconds per role (the play's own tasks under "(play)"), largest first."""
    total: dict[str, float] = defaultdict(float)
    for task in run.tasks:
        total[task.role or "(play)"] += task.seconds
    return dict(sorted(((role, round(s, 2)) for role, s in total.items()),
                       key=lambda pair: -pair[1]))


def to_json(runs: Sequence[RunCost], context: dict[str, object]) -> str:
    """The benchmark's JSON: the context (OS, hosts, machine) and every run with its tasks."""
    body = {
        **context,
        "runs": [{
            **{key: value for key, value in asdict(run).items() if key != "tasks"},
            "seconds_per_host": round(run.seconds_per_host, 2),
            "host_runs": run.host_runs,
            "statuses": run.statuses,
            "role_seconds": role_seconds(run),
            "tasks": [{**asdict(task), "label": task.label} for task in run.tasks],
        } for run in runs],
    }
    return json.dumps(body, indent=2) + "\n"


def summary_table(runs: Sequence[RunCost]) -> str:
    """One Markdown row per run: wall time, per host, module runs, recap, controller cost."""
    lines = ["| run | hosts | wall | per host | module runs | ok | changed | skipped | failed "
             "| controller CPU | controller peak RSS |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for run in runs:
        status = run.statuses
        lines.append(
            f"| {run.label} | {run.hosts} | {run.wall_seconds:.1f} s | "
            f"{run.seconds_per_host:.1f} s | {run.host_runs} | {status['ok']} | "
            f"{status['changed']} | {status['skipped']} | {status['failed']} | "
            f"{run.controller_cpu_seconds:.1f} s | {run.controller_peak_rss_mib:.0f} MiB |")
    return "\n".join(lines)


def task_table(run: RunCost, top: int = 25) -> str:
    """The `top` costliest tasks of one run (seconds summed over hosts), then the rest summed."""
    ranked = sorted(run.tasks, key=lambda task: -task.seconds)
    lines = [f"{run.label}: the {min(top, len(ranked))} costliest of {len(ranked)} tasks",
             "| task | action | seconds | module runs |", "| --- | --- | ---: | ---: |"]
    for task in ranked[:top]:
        name = task.label.replace("|", "\\|")
        lines.append(f"| {name} | {task.action} | {task.seconds:.2f} | {task.host_runs} |")
    rest = ranked[top:]
    if rest:
        lines.append(f"| the other {len(rest)} tasks | | {sum(t.seconds for t in rest):.2f} | "
                     f"{sum(t.host_runs for t in rest)} |")
    return "\n".join(lines)


def role_table(run: RunCost) -> str:
    """Seconds and module runs per role of one run."""
    runs: dict[str, int] = defaultdict(int)
    for task in run.tasks:
        runs[task.role or "(play)"] += task.host_runs
    lines = [f"{run.label}: per role", "| role | seconds | module runs |", "| --- | ---: | ---: |"]
    for role, seconds in role_seconds(run).items():
        lines.append(f"| {role} | {seconds:.2f} | {runs[role]} |")
    return "\n".join(lines)
