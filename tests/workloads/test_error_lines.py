"""Every error of the ``workloads`` command line is one readable line: under 200 characters.

The corpus walks the CLI's error paths through ``workloads.cli.main``, the console
script's entry point. Half of it is generated from the parser itself, so a new
option or subcommand is in it the day it is added: for every (sub)command an
unknown option, and for every option a missing value, a value outside its
choices and, by its type, the numbers it must refuse. The other half is the bad
input that only the commands themselves catch: sweep specs (missing, not YAML,
unknown keys and parameters, bad values and ranges), options that contradict each
other, files that are missing, are directories, or are not what they should be.

All cases run in one child process (a framework imported by one case is imported
once), each with file descriptor 2 captured, so what a case prints from C code
counts too. Paths are relative to the child's working directory, as a user types
them: the limit bounds the text around them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from workloads.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
LIMIT = 200
UNKNOWN = "--not-an-option"  # after a bad value: if the value were taken, nothing runs

# Values each option type must refuse (argparse's own types and the CLI's).
BAD_VALUES: dict[str, list[str]] = {
    "positive_int": ["abc", "0", "-3", "1.5"],
    "positive_float": ["abc", "0", "-1", "nan"],
    "non_negative_float": ["abc", "-1", "nan"],
    "unit_float": ["abc", "1.5", "-0.5"],
    "int": ["abc", "1.5"],
    "float": ["abc"],
    "memlock": ["abc", "-5"],
}


def _commands(parser: argparse.ArgumentParser, path: list[str]) -> list[tuple[list[str], Any]]:
    found = [(path, parser)]
    for action in parser._actions:  # argparse keeps no public list of actions
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, [*path, name])
    return found


def argparse_cases() -> dict[str, list[str]]:
    """Generated from the parser: unknown options, missing and refused values."""
    cases: dict[str, list[str]] = {"no command": [], "unknown command": ["no-such-command"],
                                   "mistyped command": ["chek"]}
    for path, parser in _commands(build_parser(), []):
        where = " ".join(path) or "workloads"
        cases[f"{where}: unknown option"] = [*path, "--no-such-option"]
        for action in parser._actions:
            flags = [s for s in action.option_strings if s.startswith("--")]
            if not flags or action.nargs == 0 or isinstance(action, argparse._HelpAction):
                continue
            flag = flags[0]
            cases[f"{where} {flag}: no value"] = [*path, flag]
            if action.choices is not None:
                cases[f"{where} {flag}: not a choice"] = [*path, flag, "bogus", UNKNOWN]
            type_name = getattr(action.type, "__name__", None)
            for value in BAD_VALUES.get(type_name or "", []):
                cases[f"{where} {flag} {value}"] = [*path, flag, value, UNKNOWN]
    return cases


def write(work: Path, name: str, content: Any) -> str:
    """`content` (YAML unless text) in work/name; the name as the child, run in `work`, types it."""
    path = work / name
    path.parent.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
    path.write_text(text)
    return name


STYLE = {"workload": "style", "vary": {"learning_rate": [1, 3]}}
FAKE = "tests.sweep.fake_workload"
SPECS: dict[str, Any] = {
    "spec not yaml": "workload: style\nvary: [1, 2\n",
    "spec a list": "- workload: style\n",
    "spec unknown key": {**STYLE, "varry": {}},
    "spec no workload": {"vary": {"learning_rate": [1]}},
    "spec unknown workload": {**STYLE, "workload": "stlye"},
    "spec module not found": {**STYLE, "workload": "no.such.module"},
    "spec module without register": {**STYLE, "workload": "workloads.errors"},
    "spec bad mode": {**STYLE, "mode": "spiral"},
    "spec output with a slash": {**STYLE, "output": "a/b.png"},
    "spec no vary": {"workload": "style"},
    "spec vary not a mapping": {"workload": "style", "vary": [1, 2]},
    "spec vary empty": {"workload": "style", "vary": {}},
    "spec unknown style parameter": {"workload": "style", "vary": {"learnin_rate": [1]}},
    "spec unknown style parameter, dashes": {"workload": "style", "vary": {"tv-wieght": [1]}},
    "spec unknown style parameter, nothing close": {"workload": "style", "vary": {"zzz": [1]}},
    "spec unknown cifar10 parameter": {"workload": "cifar10", "vary": {"batch": [32]}},
    "spec unknown default": {**STYLE, "defaults": {"widht": 256}},
    "spec unknown module parameter": {"workload": FAKE, "vary": {"valeu": [1]}},
    "spec bad value": {"workload": "style", "vary": {"width": [-5]}},
    "spec not a choice": {"workload": "style", "vary": {"pooling": ["median"]}},
    "spec bad range": {"workload": "style", "vary": {"tv_weight": [{"linspace": [0, 1]}]}},
    "spec bad range kind": {"workload": "style", "vary": {"tv_weight": [{"arange": [0, 1, 2]}]}},
    "spec geomspace through 0": {"workload": "style",
                                 "vary": {"tv_weight": [{"geomspace": [0, 1, 3]}]}},
    "spec repeated value": {"workload": "style", "vary": {"learning_rate": [1, 1.0]}},
    "spec star without centre": {"workload": FAKE, "vary": {"tokens": ["a", "b"]}},
    "spec null value": {"workload": "style", "vary": {"width": [None]}},
    "spec list for a single value": {"workload": "style", "vary": {"width": [[1, 2]]}},
    # What Python's parsers do not bound: a RecursionError or seconds per level before.
    "spec nested 5000 deep": "workload: style\nvary: {width: " + "[" * 5000 + "]" * 5000 + "}\n",
    "spec aliases for a billion nodes": "workload: style\nl0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
    + "".join(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * 9)}]\n" for n in range(1, 10))
    + "vary: {width: *l9}\n",
    "spec over its size cap": "workload: style\n# " + "x" * (300 << 10) + "\n",
}


def semantic_cases(work: Path) -> dict[str, list[str]]:
    """Bad input the commands catch themselves; files made in ``work``, named relative to it
    (the child runs there)."""
    good = write(work, "good.yaml", {"workload": FAKE, "vary": {"value": [1, 2]}})
    cases = {name: ["sweep", write(work, f"{i}.yaml", spec)]
             for i, (name, spec) in enumerate(SPECS.items())}
    write(work, "a-file", "not a directory\n")
    (work / "a-dir").mkdir()
    write(work, "not-a-record.json", "[1, 2]\n")
    write(work, "not-json.json", "{not json\n")
    write(work, "deep.json", '{"workload": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    write(work, "huge-number.json", '{"workload": "x", "n": ' + "9" * 5000 + "}\n")
    write(work, "fleet/host1.json", "[" * 100_000 + "]" * 100_000 + "\n")
    write(work, "not-an-image.png", "not a PNG\n")
    (work / "results/sweeps").mkdir(parents=True)
    (work / "open").mkdir()
    (work / "open").chmod(0o777)
    cases.update({
        "sweep spec missing": ["sweep", "missing.yaml"],
        "sweep spec a directory": ["sweep", "a-dir"],
        "sweep --dir a file": ["sweep", good, "--dir", "a-file"],
        "sweep --dir writable by others": ["sweep", good, "--dir", "open"],
        "sweep --devices bogus": ["sweep", good, "--devices", "gpu0"],
        "sweep --devices absent GPU": ["sweep", good, "--devices", "3"],
        "sweep --run-one unknown": ["sweep", good, "--run-one", "99"],
        "sweep slurm option, local backend": ["sweep", good, "--gres", "gpu:1"],
        "sweep local option, slurm backend": ["sweep", good, "--backend", "slurm",
                                              "--devices", "cpu"],
        "sweep --workers-scan bogus": ["sweep", good, "--workers-scan", "1,x"],
        "sweep --workers-scan too many": ["sweep", good, "--workers-scan", "1,2,4"],
        "report missing": ["report", "missing-dir"],
        "report not a record": ["report", "not-a-record.json"],
        "report not json": ["report", "not-json.json"],
        "report nested 100000 deep": ["report", "deep.json"],
        "report a 5000-digit number": ["report", "huge-number.json"],
        "report --fleet nested 100000 deep": ["report", "--fleet", "fleet"],
        "cifar10 --log-every negative": ["cifar10", "--log-every", "-1"],
        "cifar10 --save-model not keras": ["cifar10", "--save-model", "model.h5"],
        "cifar10 --data-dir with synthetic": ["cifar10", "--data-dir", "a-dir"],
        "cifar10 --data-dir missing": ["cifar10", "--data", "cifar10", "--data-dir", "missing"],
        "cifar10 --output a directory": ["cifar10", "--output", "a-dir"],
        "style --content missing": ["style", "--content", "missing.png", "--weights", "random"],
        "style --content not an image": ["style", "--content", "not-an-image.png",
                                         "--weights", "random"],
        "bench cifar10 --output a directory": ["bench", "cifar10", "--output", "a-dir"],
    })
    return cases


_DRIVER = """
import json, os, sys, tempfile
from workloads.cli import main

cases = json.loads(open(sys.argv[1]).read())
results = {}
for name, argv in cases.items():
    with tempfile.TemporaryFile() as err:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:
                code = f"raised {type(exc).__name__}: {exc}"
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        results[name] = {"code": code, "stderr": err.read().decode(errors="replace")}
with open(sys.argv[2], "w") as out:
    json.dump(results, out)
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    work = tmp_path_factory.mktemp("errors")
    cases = {**argparse_cases(), **semantic_cases(work)}
    (work / "cases.json").write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(REPO), "CUDA_VISIBLE_DEVICES": "",
           "WORKLOADS_RESULTS": "results", "WORKLOADS_HOST_COMMANDS": "1", "COLUMNS": "200"}
    env.pop("KERAS_BACKEND", None)
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, "cases.json", "results.json"], cwd=work, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr
    results: dict[str, dict[str, Any]] = json.loads((work / "results.json").read_text())
    return {name: {**results[name], "argv": argv} for name, argv in cases.items()}


def test_every_error_is_one_short_line_with_a_failing_exit(
    outcomes: dict[str, dict[str, Any]]
) -> None:
    bad = []
    for name, outcome in outcomes.items():
        lines = outcome["stderr"].splitlines()
        problems = []
        if not isinstance(outcome["code"], int) or outcome["code"] == 0:
            problems.append(f"exit {outcome['code']!r}")
        if len(lines) != 1:
            problems.append(f"{len(lines)} lines")
        if any(len(line) >= LIMIT for line in lines):
            problems.append(f"{max(len(line) for line in lines)} characters")
        if lines and "error:" not in lines[-1]:
            problems.append("no 'error:'")
        if problems:
            bad.append(f"{name} ({' '.join(outcome['argv'])}): {', '.join(problems)}: "
                       f"{outcome['stderr']!r}")
    assert not bad, "\n".join(bad)
    assert len(outcomes) > 150  # the corpus really is generated from the parser


def test_an_unknown_name_names_the_closest_and_where_the_list_is(
    outcomes: dict[str, dict[str, Any]]
) -> None:
    line = outcomes["spec unknown style parameter"]["stderr"]
    assert "did you mean learning_rate" in line and "'workloads style --help'" in line, line
    dashes = outcomes["spec unknown style parameter, dashes"]["stderr"]
    assert "did you mean tv_weight" in dashes, dashes
    nothing = outcomes["spec unknown style parameter, nothing close"]["stderr"]
    assert "did you mean" not in nothing and "'workloads style --help'" in nothing, nothing
    command = outcomes["mistyped command"]["stderr"]
    assert "invalid choice: 'chek' (did you mean check?)" in command, command
    module = outcomes["spec unknown module parameter"]["stderr"]
    assert "did you mean value" in module and f"'python -m {FAKE} --help'" in module, module
