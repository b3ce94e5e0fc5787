"""How often the fleet verdict is wrong: false positives and misses over generated fleets.

For each scenario, `fleets` fleets of 3-16 hosts (battery-shaped synthetic records, every
figure within ±noise of its healthy value), generated from one fixed seed so that every run
prints the same figures. In a `healthy` fleet every host should pass; in the others one host
carries one planted fault (a GPU missing, NVLinks down, one GPU slow by a given share, a
check or a dtype missing, an empty or unfinished record) and should not. Counted: the
planted hosts judged `pass` (misses), `warn` and `fail`; the healthy hosts judged anything
but `pass` (false positives).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from workloads.fleet.load import host_from_record
from workloads.fleet.synthetic import CHECKS, MATMUL, Defect, synthetic_record
from workloads.fleet.verdict import judge

MIN_HOSTS, MAX_HOSTS = 3, 16


def _slow(share: float) -> Callable[[random.Random, int], Defect]:
    return lambda rng, gpus: Defect("slow GPU", gpu=rng.randrange(gpus), factor=1 - share)


SCENARIOS: dict[str, Callable[[random.Random, int], Defect] | None] = {
    "healthy": None,
    "a GPU missing": lambda rng, gpus: Defect("missing GPU", gpu=rng.randrange(gpus)),
    "1 NVLink down": lambda rng, gpus: Defect("NVLink down", gpu=rng.randrange(gpus)),
    "a GPU 5 % slow": _slow(0.05),
    "a GPU 10 % slow": _slow(0.10),
    "a GPU 15 % slow": _slow(0.15),
    "a GPU 20 % slow": _slow(0.20),
    "a GPU 30 % slow": _slow(0.30),
    "a check missing": lambda rng, gpus: Defect("missing check", check=rng.choice(CHECKS)),
    "a matmul dtype missing": lambda rng, gpus: Defect(
        "missing dtype", dtype=rng.choice([dtype for dtype, _, _ in MATMUL])),
    "an empty record": lambda rng, gpus: Defect("empty record"),
    "an unfinished record": lambda rng, gpus: Defect("partial record"),
}


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
    for index, (name, make) in enumerate(SCENARIOS.items()):
        rng = random.Random(seed * 1000 + index)  # each scenario its own stream: order-proof
        tally = Tally(name)
        for _ in range(fleets):
            size = rng.randint(MIN_HOSTS, MAX_HOSTS)
            planted = rng.randrange(size) if make is not None else None
            defect = make(rng, gpus) if make is not None else None
            hosts = [host_from_record(f"h{i}", synthetic_record(
                f"h{i}", gpus, rng, noise=noise, defect=defect if i == planted else None))
                for i in range(size)]
            for verdict in judge(hosts).verdicts:
                if verdict.host == f"h{planted}":
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
