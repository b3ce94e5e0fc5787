"""The sweep spec: a YAML file naming a workload, its fixed values and what to vary.

```yaml
workload: style            # or cifar10, or a module path following the command contract
mode: star                 # star: one parameter at a time around the defaults; grid: product
defaults: {width: 512, iterations: 1000, learning_rate: 10}
vary:
  learning_rate: [1, 3, 10, 30]
  style_weight: {linspace: [0, 200, 50]}     # numpy.linspace(0, 200, 50)
  style_scales: [{linspace: [0.1, 1, 19]}, {linspace: [1.1, 3, 30]}]
output: out.png            # optional: file name of each run's output
```

Every mistake is reported before the first run, as one line naming the key and
the fix: a spec found wrong after six hours of GPU time is the failure this
module exists to prevent.

What a spec expands to is bounded before it is built: a range's count is at most
:data:`RANGE_COUNT_MAX` (checked before ``numpy.linspace`` allocates), a parameter
has at most :data:`VALUES_MAX` values, and the plan at most :data:`RUNS_MAX` runs
(star: the sum of the scans; grid: their product, multiplied with an early stop).
Repeated values are found in one pass with a set. Every key is a string (a YAML
key may be a number, a list or ``null``, and sorting them mixed raises), and a
value is only ever shown through :func:`workloads.errors.brief` (``repr`` of an
integer past 4300 digits raises).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workloads.bounded import SPEC_MAX_BYTES, BadInput, NotAFile, read_yaml
from workloads.errors import WorkloadError, brief, clip
from workloads.sweep.workload import Value, Workload, load_workload

MODES = ("star", "grid")
TOP_KEYS = ("workload", "mode", "defaults", "vary", "output")
RANGES = ("linspace", "geomspace")
# A study's scan has tens of values; a grid, hundreds of runs. Each run is a training
# job of minutes, so 10,000 runs is weeks of GPU time: past that a spec is a mistake.
RANGE_COUNT_MAX = 1_000
VALUES_MAX = 1_000
RUNS_MAX = 10_000


@dataclass(frozen=True)
class SweepSpec:
    """A validated spec: every value already converted by the workload's own parser."""

    path: Path
    workload: Workload
    mode: str
    defaults: dict[str, Value]
    vary: dict[str, list[Value]]

    @property
    def center(self) -> dict[str, Value]:
        """Where the star is centred (and the grid is sliced for the contact sheet).

        The defaults, with each varied parameter the spec gives no default for
        taken from the workload's own default (star) or its first value (grid).
        """
        center = dict(self.defaults)
        for name, values in self.vary.items():
            if name not in center:
                fallback = self.workload.default(name) if self.mode == "star" else None
                center[name] = (
                    self.workload.option(name).normalise(fallback)
                    if fallback is not None
                    else values[0]
                )
        return center

    def as_dict(self) -> dict[str, Any]:
        """The normalised spec, as saved beside the database for the report."""
        return {
            "workload": self.workload.name,
            "mode": self.mode,
            "defaults": self.defaults,
            "vary": self.vary,
            "center": self.center,
            "output": self.workload.output_name,
        }


def load_spec(path: Path) -> SweepSpec:
    """Read and validate a spec file; raise WorkloadError with one line on any problem."""
    path = Path(path)
    data = _read_yaml(path)

    def fail(problem: str, fix: str) -> WorkloadError:
        return WorkloadError(f"{path}: {problem}", fix)

    _string_keys(data, "the spec", fail)
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise fail(f"unknown key {brief(unknown[0])}", f"the keys are {', '.join(TOP_KEYS)}")
    name = data.get("workload")
    if not isinstance(name, str) or not name:
        raise fail("no 'workload' given", "add e.g. 'workload: style'")
    mode = data.get("mode", "star")
    if not isinstance(mode, str) or mode not in MODES:
        raise fail(f"mode {brief(mode)} is not star or grid", "use 'mode: star' or 'mode: grid'")
    output = data.get("output")
    if output is not None and (not isinstance(output, str) or "/" in output or not output):
        raise fail(f"output {brief(output)} is not a file name", "give e.g. 'output: out.png'")
    try:
        workload = load_workload(name, output)
    except WorkloadError as exc:
        raise fail(exc.problem, exc.fix or "fix 'workload'") from None

    defaults_raw = _mapping(data.get("defaults", {}), "defaults", fail)
    vary_raw = _mapping(data.get("vary"), "vary", fail)
    if not vary_raw:
        raise fail("'vary' names no parameter", "add e.g. 'vary: {learning_rate: [1, 3, 10]}'")

    defaults = {
        key: _normalise(workload, key, value, f"defaults.{key}", fail)
        for key, value in defaults_raw.items()
    }
    vary: dict[str, list[Value]] = {}
    for key, raw in vary_raw.items():
        _check_name(workload, key, f"vary.{key}", fail)
        items = _expand_values(raw, f"vary.{key}", fail)
        values = [_normalise(workload, key, item, f"vary.{key}", fail) for item in items]
        repeated = _first_repeat(values)
        if repeated is not None:
            raise fail(f"vary.{key} repeats the value {brief(repeated)}", "list each value once")
        vary[key] = values
    _check_runs(mode, vary, fail)
    spec = SweepSpec(path, workload, mode, defaults, vary)
    if mode == "star":
        missing = [k for k in vary if k not in defaults and workload.default(k) is None]
        if missing:
            raise fail(
                f"star mode needs a centre for {missing[0]!r}, and the workload has no default",
                f"add '{missing[0]}: VALUE' under defaults",
            )
    return spec


def _read_yaml(path: Path) -> dict[str, Any]:
    """The spec's mapping, read in bounded size, depth and nodes (:mod:`workloads.bounded`)."""
    try:
        data = read_yaml(path, SPEC_MAX_BYTES)
    except FileNotFoundError:
        raise WorkloadError(f"spec {path} does not exist", "check the path") from None
    except IsADirectoryError:
        raise WorkloadError(f"spec {path} is a directory", "give the spec's file") from None
    except OSError as exc:
        raise WorkloadError(f"cannot read spec {path} ({exc.strerror})", "check the path") from None
    except NotAFile as exc:
        raise WorkloadError(f"spec {path} {exc}", "give the spec's file itself") from None
    except BadInput as exc:
        raise WorkloadError(f"{path} {exc}", "fix the YAML there") from None
    if not isinstance(data, dict):
        raise WorkloadError(
            f"{path} is not a YAML mapping", "start with 'workload: style' and a 'vary:' block"
        )
    return data


def _mapping(value: Any, key: str, fail: Any) -> dict[str, Any]:
    if value is None:
        if key == "vary":
            raise fail("no 'vary' given", "add e.g. 'vary: {learning_rate: [1, 3, 10]}'")
        return {}
    if not isinstance(value, dict):
        raise fail(f"'{key}' is not a mapping", f"write '{key}:' followed by 'name: value' lines")
    _string_keys(value, f"'{key}'", fail)
    return value


def _string_keys(mapping: dict[Any, Any], where: str, fail: Any) -> None:
    """Every key a string: YAML allows numbers, lists and null, and mixed keys do not sort."""
    for key in mapping:
        if not isinstance(key, str):
            raise fail(f"{where} has the key {brief(key)}, which is not a name",
                       "write parameter names as plain words, e.g. 'learning_rate:'")


def _hashable(value: Any) -> Any:
    """``value`` as a set member equal where ``==`` says equal (lists become tuples)."""
    return tuple(_hashable(item) for item in value) if isinstance(value, list) else value


def _first_repeat(values: list[Any]) -> Any:
    """The first value equal to an earlier one, in one pass (a set), or None."""
    seen: set[Any] = set()
    for value in values:
        key = _hashable(value)
        if key in seen:
            return value
        seen.add(key)
    return None


def _check_runs(mode: str, vary: dict[str, list[Any]], fail: Any) -> None:
    """The plan's size, counted before psweep builds it: at most :data:`RUNS_MAX` runs."""
    runs = 0 if mode == "star" else 1
    for values in vary.values():
        runs = runs + len(values) if mode == "star" else runs * len(values)
        if runs > RUNS_MAX:
            raise fail(f"the {mode} plan has more than {RUNS_MAX} runs",
                       "vary fewer values (or split the study into several specs)")


def _check_name(workload: Workload, key: Any, where: str, fail: Any) -> None:
    """Known parameters pass; an unknown one names the closest and where the full list is.

    The list itself (two dozen names for style) would make a line of 500 characters.
    """
    if key in workload.options:
        return
    close = difflib.get_close_matches(str(key).replace("-", "_"), sorted(workload.options), n=2)
    hint = f" (did you mean {' or '.join(close)}?)" if close else ""
    raise fail(
        f"{where}: unknown parameter of {workload.name}{hint}",
        f"see '{workload.help_command}'",
    )


def _normalise(workload: Workload, key: str, value: Any, where: str, fail: Any) -> Value:
    _check_name(workload, key, where, fail)
    try:
        return workload.option(key).normalise(value)
    except ValueError as exc:
        flag = workload.option(key).flag
        raise fail(
            f"{where}: bad value {brief(value)} ({clip(str(exc), 100)})",
            f"see 'workloads {workload.name} --help' for {flag}",
        ) from None


def _expand_values(raw: Any, where: str, fail: Any) -> list[Any]:
    """A list of values, where ``{linspace: [a, b, n]}`` entries expand in place."""
    items = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else None
    if items is None:
        raise fail(f"{where} is not a list of values", "write e.g. [1, 3, 10]")
    values: list[Any] = []
    for item in items:
        values += _expand_range(item, where, fail) if isinstance(item, dict) else [item]
        if len(values) > VALUES_MAX:
            raise fail(f"{where} has more than {VALUES_MAX} values",
                       "vary fewer values (a range's count included)")
    if not values:
        raise fail(f"{where} has no values", "list at least one value, e.g. [1, 3, 10]")
    return values


def _expand_range(item: Mapping[str, Any], where: str, fail: Any) -> list[float]:
    import numpy as np

    if len(item) != 1 or next(iter(item)) not in RANGES:
        raise fail(
            f"{where}: {brief(next(iter(item), None))} is not a value range",
            "write {linspace: [start, stop, count]} or {geomspace: [start, stop, count]}",
        )
    kind, args = next(iter(item.items()))
    if (
        not isinstance(args, list)
        or len(args) != 3
        or not all(isinstance(a, int | float) and not isinstance(a, bool) for a in args)
        or not isinstance(args[2], int)
        or args[2] < 1
    ):
        raise fail(
            f"{where}: {kind} needs [start, stop, count]", f"write e.g. {{{kind}: [1, 100, 5]}}"
        )
    if args[2] > RANGE_COUNT_MAX:
        raise fail(f"{where}: {kind} count {brief(args[2])} is over {RANGE_COUNT_MAX}",
                   "use fewer values: a study's scan has tens")
    if not all(_finite(a) for a in args[:2]):
        raise fail(f"{where}: {kind} needs finite numbers", f"write e.g. {{{kind}: [1, 100, 5]}}")
    if kind == "geomspace" and (args[0] <= 0 or args[1] <= 0):
        raise fail(
            f"{where}: geomspace needs start and stop > 0", "use linspace for ranges through 0"
        )
    space = np.linspace if kind == "linspace" else np.geomspace
    # tolist(): plain Python floats, since numpy scalars hash differently in psweep.
    return [float(v) for v in space(args[0], args[1], args[2]).tolist()]


def _finite(number: int | float) -> bool:
    """A float that is finite, or an int that one can hold (``float`` of 10**400 raises)."""
    if isinstance(number, int):
        return number.bit_length() <= 1023
    return math.isfinite(number)
