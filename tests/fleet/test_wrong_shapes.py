"""Records that are JSON objects of the wrong shape: each fails or is judged, never a traceback.

A record edited by hand, merged by a script or written by another tool is valid JSON with
anything anywhere: a list where the battery writes a list of rows, a dict where it writes a
check's name, a number where it writes the GPU list. Reading one must judge that host (a
`fail` where its content cannot be trusted) and every other host of the run, in all four
outputs. The corpus: every field the fleet report reads, on a record of the battery's own
shape (`workloads.fleet.synthetic`), replaced in turn by each JSON type of the wrong kind,
a fixed-seed sample of the pairs.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from workloads.fleet.command import render_fleet
from workloads.fleet.synthetic import synthetic_record

WRONG: list[Any] = [None, True, 0, -1, 1e308, 10**30, "", "x", [], [1, "a"], {}, {"a": [1]}]


def _base(host: str, seed: int) -> dict[str, Any]:
    return synthetic_record(host, 2, random.Random(seed), noise=0.01)


def _setter(path: tuple[str | int, ...]) -> Callable[[dict[str, Any], Any], None]:
    def put(record: dict[str, Any], value: Any) -> None:
        where: Any = record
        for step in path[:-1]:
            where = where[step]
        where[path[-1]] = value
    return put


def _paths(record: dict[str, Any]) -> list[tuple[str | int, ...]]:
    """Every key of the record, of its env, of its first device, of its first and last rows."""
    paths: list[tuple[str | int, ...]] = [(k,) for k in record]
    paths += [("env", k) for k in record["env"]]
    paths += [("devices", 0, k) for k in record["devices"][0]] + [("devices", 0)]
    last = len(record["findings"]) - 1
    for row in (0, last):
        paths += [("findings", row, k) for k in record["findings"][row]] + [("findings", row)]
    return paths


_PATHS = _paths(_base("x", 0))
CASES = [*random.Random(47).sample([(p, i) for p in _PATHS for i in range(len(WRONG))], 80),
    (("findings", 0, "check"), WRONG.index({})), (("findings", 0, "check"), WRONG.index([])),
    (("devices",), WRONG.index(0)), (("devices",), WRONG.index(True)),
    (("devices",), WRONG.index(1e308)), (("host",), WRONG.index([])),
    (("host",), WRONG.index({"a": [1]})), (("host",), WRONG.index(1e308))]  # found in review


@pytest.mark.parametrize(("path", "wrong"), CASES, ids=[f"{'.'.join(map(str, p))}={WRONG[i]!r}"[:60]
                                                        for p, i in CASES])
def test_a_record_of_the_wrong_shape_is_judged_with_the_rest(tmp_path: Path,
                                                             path: tuple[str | int, ...],
                                                             wrong: int) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for index in range(3):
        (run / f"ok{index}.json").write_text(json.dumps(_base(f"ok{index}", index)))
    odd = copy.deepcopy(_base("odd", 9))
    _setter(path)(odd, copy.deepcopy(WRONG[wrong]))
    (run / "odd.json").write_text(json.dumps(odd))
    fleet, _ = render_fleet(run, tmp_path / "out")
    report = json.loads((tmp_path / "out" / "fleet.json").read_text())
    names = {h["host"] for h in report["hosts"]}
    assert names == {"ok0", "ok1", "ok2", "odd"}, names
    html = (tmp_path / "out" / "fleet.html").read_text()
    markdown = (tmp_path / "out" / "fleet.md").read_text()
    assert all(name in html for name in names)
    odd_verdict = next(v.verdict for v in fleet.verdicts if v.host == "odd")
    assert odd_verdict == "pass" or "| odd |" in markdown
    assert {v.host: v.verdict for v in fleet.verdicts if v.host.startswith("ok")} == \
        dict.fromkeys(("ok0", "ok1", "ok2"), "pass") or path[0] == "devices"
