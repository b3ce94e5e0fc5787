"""What the sweep knows about a workload, read from the workload's own argparse parser.

Parameter names, types, choices and flags come from the ``register(subparsers)``
of the workload's command module, never from a hand-kept list, so a new option
of ``workloads style`` is sweepable the day it is added and a typo in a spec is
caught before the first run. Values are normalised through the option's own
``type`` (``10`` and ``10.0`` become the same float), which also keeps psweep's
pset hashes stable: a spec edited from ``1e-3`` to ``0.001`` resumes, not reruns.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workloads.errors import WorkloadError

# Built-in workloads a sweep can run: name -> file name of each run's output.
# The record is the JSON beside it (out.png -> out.json), written by the workload.
BUILTIN_OUTPUTS: dict[str, str] = {"style": "out.png", "cifar10": "out.json"}
# Result columns the sweep's summary and the explorer show first.
BUILTIN_METRICS: dict[str, tuple[str, ...]] = {
    "style": ("last_loss_total_", "best_loss_total_", "iterations_per_sec_"),
    "cifar10": ("examples_per_sec_", "accuracy_", "step_time_s_"),
}

# Options the sweep sets itself (or that make no sense per run).
RESERVED = frozenset({"output", "help", "version"})

Scalar = bool | int | float | str
Value = Scalar | list[Scalar]


@dataclass(frozen=True)
class Option:
    """One sweepable option of a workload: its name (argparse dest) and how to pass it."""

    name: str
    action: argparse.Action

    @property
    def flag(self) -> str:
        longs = [s for s in self.action.option_strings if s.startswith("--")]
        return longs[0] if longs else self.action.option_strings[0]

    @property
    def is_switch(self) -> bool:
        """A flag without a value (``--xla``, ``--preserve-colors/--no-preserve-colors``)."""
        return self.action.nargs == 0

    @property
    def is_list(self) -> bool:
        return self.action.nargs in ("+", "*") or isinstance(self.action.nargs, int)

    def normalise(self, value: Any) -> Value:
        """Convert a spec value the way the workload's parser would; raise ValueError."""
        if value is None:
            raise ValueError("null is not a value (leave the parameter out to get its default)")
        if self.is_switch:
            if not isinstance(value, bool):
                raise ValueError(f"{value!r} is not true or false ({self.flag} is a switch)")
            if not isinstance(self.action, argparse.BooleanOptionalAction):
                const = self.action.const
                if not isinstance(const, bool):
                    raise ValueError(f"{self.flag} sets a constant and cannot be swept")
                if value != const and value != self.action.default:
                    raise ValueError(f"{self.flag} cannot be set to {value}")
            return value
        if self.is_list:
            items = value if isinstance(value, list) else [value]
            if not items and self.action.nargs == "+":
                raise ValueError("needs at least one value")
            return [self._convert(item) for item in items]
        if isinstance(value, list | dict):
            raise ValueError(f"{value!r} is not a single value ({self.flag} takes one)")
        return self._convert(value)

    def _convert(self, value: Any) -> Scalar:
        if isinstance(value, list | dict):
            raise ValueError(f"{value!r} is not a single value")
        text = _as_text(value)
        convert = self.action.type or str
        try:
            converted = convert(text)  # type: ignore[operator]
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
        except (TypeError, ValueError, WorkloadError) as exc:
            raise ValueError(f"{text!r} is not accepted by {self.flag} ({exc})") from None
        if self.action.choices is not None and converted not in self.action.choices:
            choices = ", ".join(map(str, self.action.choices))
            raise ValueError(f"{text!r} is not one of {choices}")
        if isinstance(converted, bool | int | float | str):
            return converted
        return text  # e.g. type=Path: keep the text, which hashes and prints plainly

    def argv(self, value: Value) -> list[str]:
        """Command-line words that set this option to ``value``."""
        if self.is_switch:
            if isinstance(self.action, argparse.BooleanOptionalAction):
                return [self.flag] if value else [f"--no-{self.flag[2:]}"]
            return [self.flag] if value == self.action.const else []
        if isinstance(value, list):
            return [self.flag, *(_as_text(item) for item in value)]
        return [f"{self.flag}={_as_text(value)}"]  # '=' keeps negative numbers values


@dataclass(frozen=True)
class Workload:
    """A command the sweep runs once per parameter set, in a fresh process."""

    name: str
    module: str  # module holding register(subparsers)
    launch: tuple[str, ...]  # argv after the interpreter: ('-m', 'workloads', 'style')
    output_name: str
    options: Mapping[str, Option]

    @property
    def help_command(self) -> str:
        """The command whose ``--help`` lists this workload's options (the sweep's parameters)."""
        if self.launch[:2] == ("-m", "workloads"):
            return " ".join(["workloads", *self.launch[2:], "--help"])
        return " ".join(["python", *self.launch, "--help"])

    def option(self, name: str) -> Option:
        return self.options[name]

    def default(self, name: str) -> Any:
        return self.options[name].action.default

    def command(self, params: Mapping[str, Value], output: str) -> list[str]:
        """The full argv of one run: interpreter, workload, parameters, --output."""
        words = [sys.executable, *self.launch]
        for name, value in params.items():
            words += self.options[name].argv(value)
        return [*words, "--output", output]


def _as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def load_workload(name: str, output_name: str | None = None) -> Workload:
    """Resolve ``name``: a built-in (``style``, ``cifar10``) or a dotted module path.

    A module path (e.g. ``mypackage.mycommand``) must follow the workloads command
    contract: ``register(subparsers)`` adding one subcommand, runnable with
    ``python -m MODULE ARGS``, writing its record beside ``--output``.
    """
    from workloads.cli import COMMANDS, Parser

    launch: tuple[str, ...]
    if name in BUILTIN_OUTPUTS:
        module_name, launch = COMMANDS[name], ("-m", "workloads", name)
    elif "." in name:
        module_name, launch = name, ("-m", name)
    else:
        raise WorkloadError(
            f"unknown workload {name!r}",
            f"use one of {', '.join(BUILTIN_OUTPUTS)} (or a module path such as pkg.command)",
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise WorkloadError(
            f"workload {name!r} is not available ({exc})",
            "install the package that provides it or fix the workload name",
        ) from exc
    if not hasattr(module, "register"):
        raise WorkloadError(
            f"module {module_name} has no register(subparsers)",
            "point 'workload' to a command module of the workloads contract",
        )
    root = Parser(prog="workloads")
    sub = root.add_subparsers(parser_class=Parser)
    module.register(sub)
    parsers = list(sub.choices.values())
    parser = sub.choices.get(name, parsers[0] if parsers else None)
    if parser is None:
        raise WorkloadError(f"module {module_name} registered no command", "check its register()")
    options = {
        action.dest: Option(action.dest, action)
        for action in parser._actions  # argparse keeps no public list of actions
        if action.option_strings and action.dest not in RESERVED
        and action.dest != argparse.SUPPRESS
    }
    output = output_name or BUILTIN_OUTPUTS.get(name, "out.json")
    return Workload(name, module_name, launch, output, options)
