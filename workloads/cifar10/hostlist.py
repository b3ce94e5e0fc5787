"""SLURM host lists (``gpu-node[01-04,07],login``) expanded to node names.

Why here and not TensorFlow's expander: the worker chooses its bind address
(from the job's other nodes) before TensorFlow is imported, since it re-executes
itself with the preload library first. The grammar is SLURM's: names separated
by commas; a bracket holds numbers and ranges separated by commas, each padded
to the width of its lower bound (``[08-10]`` is 08, 09, 10); several brackets in
one name multiply (``r[1-2]n[1-2]`` is r1n1, r1n2, r2n1, r2n2). For the lists
TensorFlow's ``SlurmClusterResolver`` reads (one bracket, at the end) the names
are TensorFlow's, in its order (tests/workloads/test_hostlist.py).
"""

from __future__ import annotations

import itertools
import re

_PIECE = re.compile(r"\[([^\[\]]*)\]|([^\[\]]+)")
_RANGE = re.compile(r"(\d+)(?:-(\d+))?")


class HostlistError(ValueError):
    """The text is not a SLURM host list."""


def _split(hostlist: str) -> list[str]:
    """The names of `hostlist`: split at commas outside brackets."""
    names: list[str] = []
    depth, current = 0, ""
    for char in hostlist:
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if depth not in (0, 1):
            raise HostlistError(f"unbalanced brackets in {hostlist!r}")
        if char == "," and depth == 0:
            names.append(current)
            current = ""
        else:
            current += char
    if depth != 0:
        raise HostlistError(f"unbalanced brackets in {hostlist!r}")
    names.append(current)
    if any(not name for name in names):
        raise HostlistError(f"an empty name in {hostlist!r}")
    return names


def _numbers(ranges: str) -> list[str]:
    """``01-03,7`` -> 01, 02, 03, 7."""
    numbers: list[str] = []
    for part in ranges.split(","):
        match = _RANGE.fullmatch(part)
        if match is None:
            raise HostlistError(f"{part!r} is not a number or a range LOW-HIGH")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise HostlistError(f"the range {part!r} runs backwards")
        numbers.extend(str(n).zfill(len(low)) for n in range(int(low), int(high) + 1))
    return numbers


def expand(hostlist: str) -> list[str]:
    """The node names of a SLURM host list, in order, duplicates kept (as SLURM keeps them)."""
    nodes: list[str] = []
    for name in _split(hostlist.strip()):
        choices = []
        for bracket, text in (m.groups() for m in _PIECE.finditer(name)):
            choices.append(_numbers(bracket) if bracket is not None else [text])
        nodes.extend("".join(parts) for parts in itertools.product(*choices))
    return nodes
