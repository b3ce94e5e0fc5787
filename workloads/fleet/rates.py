"""How often the fleet verdict is wrong: false positives and misses over generated fleets.

For each scenario, `fleets` fleets of 3-16 hosts (battery-shaped synthetic records, every
figure within ±noise of its healthy value), generated from one fixed seed so that every run
prints the same figures. Each fleet is judged as `workloads report --fleet` judges a run
directory: with its inventory (every host's name expected), unreadable bytes read as such.
In a healthy fleet (of 3-16 hosts of one GPU model, of two hosts, or of two GPU models)
every host should pass; in the others one host carries one planted fault (a GPU missing,
NVLinks down, one GPU slow by a given share, a check or a dtype missing, an empty or
unfinished record, no record at all, a record cut short, a GPU of another model, a UUID
twice in one record, one of two hosts 40 % slow, a host's GPUs split evenly between two
models) or two hosts do (one machine's record under two names: both fail; two of three
hosts 40 % slow) and should not pass. Counted: the planted hosts judged `pass`
(misses), `warn` and `fail`; the healthy hosts judged anything but `pass` (false
positives).
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workloads.fleet.load import absent_hosts, host_from_bytes, host_from_record
from workloads.fleet.model import Host
from workloads.fleet.synthetic import (
    CHECKS,
    GPU_NAME,
    MATMUL,
    OTHER_GPU_NAME,
    Defect,
    synthetic_record,
)
from workloads.fleet.verdict import judge

MIN_HOSTS, MAX_HOSTS = 3, 16
RUN = Path("run")  # the run directory the absent hosts' reasons name


def _slow(share: float) -> Callable[[random.Random, int], Defect]:
    return lambda rng, gpus: Defect("slow GPU", gpu=rng.randrange(gpus), factor=1 - share)


@dataclass(frozen=True)
class Scenario:
    """One kind of fleet: its sizes, its GPU models, and the fault planted (None: healthy).

    `defect` plants a fault in one host's record; `fault` one the fleet's files carry:
    "missing record" (the inventory lists the host, the run has no record), "unreadable
    record" (its JSON cut short at a random byte), "copied record" (another host's record
    under its name: both hosts are planted, both must fail), "second host too" (the next
    host carries the same defect: both are planted).
    """

    name: str
    defect: Callable[[random.Random, int], Defect] | None = None
    fault: str | None = None
    hosts: tuple[int, int] = (MIN_HOSTS, MAX_HOSTS)
    models: tuple[str, ...] = (GPU_NAME,)

    @property
    def healthy(self) -> bool:
        return self.defect is None and self.fault is None


def _defect(kind: str) -> Callable[[random.Random, int], Defect]:
    return lambda rng, gpus: Defect(kind, gpu=rng.randrange(gpus))


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("healthy"),
    Scenario("a GPU missing", _defect("missing GPU")),
    Scenario("1 NVLink down", _defect("NVLink down")),
    Scenario("a GPU 5 % slow", _slow(0.05)),
    Scenario("a GPU 10 % slow", _slow(0.10)),
    Scenario("a GPU 15 % slow", _slow(0.15)),
    Scenario("a GPU 20 % slow", _slow(0.20)),
    Scenario("a GPU 30 % slow", _slow(0.30)),
    Scenario("a check missing", lambda rng, gpus: Defect("missing check",
                                                         check=rng.choice(CHECKS))),
    Scenario("a matmul dtype missing", lambda rng, gpus: Defect(
        "missing dtype", dtype=rng.choice([dtype for dtype, _, _ in MATMUL]))),
    Scenario("an empty record", lambda rng, gpus: Defect("empty record")),
    Scenario("an unfinished record", lambda rng, gpus: Defect("partial record")),
    # Added later, so the first twelve keep their random streams (and their figures).
    Scenario("healthy, 2 hosts", hosts=(2, 2)),
    Scenario("healthy, 2 GPU models", models=(GPU_NAME, OTHER_GPU_NAME)),
    Scenario("no record (inventory)", fault="missing record"),
    Scenario("a record cut short", fault="unreadable record"),
    Scenario("a GPU of another model", _defect("other-model GPU")),
    Scenario("a UUID twice in a host", _defect("duplicate UUID")),
    Scenario("a record under 2 names", fault="copied record"),
    Scenario("2 hosts, one 40 % slow", lambda rng, gpus: Defect("slow host", factor=0.6),
             hosts=(2, 2)),
    Scenario("3 hosts, two 40 % slow", lambda rng, gpus: Defect("slow host", factor=0.6),
             fault="second host too", hosts=(3, 3)),
    Scenario("a host split 4+4 models", _defect("split models")),
)


def fleet_hosts(scenario: Scenario, rng: random.Random, gpus: int, noise: float
                ) -> tuple[list[Host], set[str]]:
    """One generated fleet as the report reads it, and the names of its planted hosts."""
    size = rng.randint(*scenario.hosts)
    planted = rng.randrange(size) if not scenario.healthy else None
    defect = scenario.defect(rng, gpus) if scenario.defect is not None else None
    names = [f"h{i}" for i in range(size)]
    also = (planted + 1) % size if planted is not None and \
        scenario.fault == "second host too" else None
    records = {name: synthetic_record(name, gpus, rng, noise=noise,
                                      defect=defect if i in (planted, also) else None,
                                      model=scenario.models[i % len(scenario.models)])
               for i, name in enumerate(names)}
    bad = {names[i] for i in (planted, also) if i is not None}
    if planted is not None and scenario.fault == "copied record":
        source = names[(planted + 1 + rng.randrange(size - 1)) % size]
        records[names[planted]] = copy.deepcopy(records[source])
        bad.add(source)
    hosts = []
    for name, record in records.items():
        if name in bad and scenario.fault == "missing record":
            continue
        if name in bad and scenario.fault == "unreadable record":
            data = json.dumps(record).encode()
            hosts.append(host_from_bytes(name, data[:rng.randrange(1, len(data))]))
            continue
        hosts.append(host_from_record(name, record))
    return hosts + absent_hosts(hosts, names, RUN), bad


@dataclass
class Tally:
    """One scenario's counts."""

    name: str
    fleets: int = 0
    planted: dict[str, int] = field(default_factory=lambda: {"pass": 0, "warn": 0, "fail": 0})
    healthy_hosts: int = 0
    healthy_not_pass: int = 0

    @property
    def miss_rate(self) -> float | None:
        total = sum(self.planted.values())
        return self.planted["pass"] / total if total else None

    @property
    def false_positive_rate(self) -> float:
        return self.healthy_not_pass / self.healthy_hosts if self.healthy_hosts else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.name, "fleets": self.fleets, "planted": self.planted,
                "miss_rate": self.miss_rate, "healthy_hosts": self.healthy_hosts,
                "healthy_not_pass": self.healthy_not_pass,
                "false_positive_rate": self.false_positive_rate}


def measure(fleets: int, gpus: int, noise: float, seed: int = 0) -> list[Tally]:
    """Every scenario over `fleets` generated fleets of `gpus`-GPU hosts."""
    tallies = []
    for index, scenario in enumerate(SCENARIOS):
        rng = random.Random(seed * 1000 + index)  # each scenario its own stream: order-proof
        tally = Tally(scenario.name)
        for _ in range(fleets):
            hosts, planted = fleet_hosts(scenario, rng, gpus, noise)
            for verdict in judge(hosts).verdicts:
                if verdict.host in planted:
                    tally.planted[verdict.verdict] += 1
                else:
                    tally.healthy_hosts += 1
                    tally.healthy_not_pass += verdict.verdict != "pass"
            tally.fleets += 1
        tallies.append(tally)
    return tallies


def table(tallies: list[Tally]) -> str:
    """The rates as a plain-text table."""
    lines = [f"{'scenario':<24} {'fleets':>6}  {'planted: pass':>13} {'warn':>5} {'fail':>5} "
             f"{'miss rate':>9}  {'healthy hosts not pass':>24}"]
    for t in tallies:
        miss = "-" if t.miss_rate is None else f"{t.miss_rate:.1%}"
        planted = ("-", "-", "-") if t.miss_rate is None else (
            str(t.planted["pass"]), str(t.planted["warn"]), str(t.planted["fail"]))
        healthy = f"{t.healthy_not_pass} of {t.healthy_hosts} ({t.false_positive_rate:.2%})"
        lines.append(f"{t.name:<24} {t.fleets:>6}  {planted[0]:>13} {planted[1]:>5} "
                     f"{planted[2]:>5} {miss:>9}  {healthy:>24}")
    return "\n".join(lines)
