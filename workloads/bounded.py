"""Reading files from outside in bounded memory and time: a size cap, then a checked parse.

Why: a record, a log, a spec or a fleet's ``<host>.json`` may come from another
host, another user or a broken disk, and Python's parsers trust their input's
shape. ``json.loads`` recurses once per ``[``, so ten thousand of them end in a
``RecursionError`` (not a ``JSONDecodeError``: a traceback), and a 5000-digit
number in an int field raises ``ValueError`` from ``int``. YAML's aliases let a
few hundred bytes stand for a billion nodes once anything walks the result. So
every reader here:

* refuses a file over its cap from ``fstat``, before reading a byte, and reads at
  most cap + 1 bytes (a file that grows meanwhile is still refused);
* checks the text before the parser sees it: JSON nesting (one pass over the
  bytes, strings skipped), number lengths (``parse_int``/``parse_float`` refuse
  more than :data:`NUMBER_CHARS_MAX` characters), YAML flow nesting (PyYAML's
  scanner is quadratic in it), then YAML depth, aliases and node count on the
  composed node graph, before anything is constructed;
* turns every failure into :class:`BadInput` (a ``ValueError``), whose message is
  one line: callers add the file's name and the fix.

The bound, for a file of ``n`` bytes under its cap: time linear in ``n`` (for YAML
about a second per 100 kB with libyaml, ten with pure-Python PyYAML: hence a spec's
256 KiB cap); memory at most about 80 times ``n`` for JSON (an empty ``{}`` costs
CPython 64 bytes; the text itself, decoded, ``n``), and for YAML the node graph
PyYAML composes (a few hundred bytes a node; aliases are counted, never expanded).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from workloads.errors import brief, clip

JSON_DEPTH_MAX = 64  # a record nests 4 deep; JSON's C scanner recurses per level
NUMBER_CHARS_MAX = 100  # a float's 17 digits, an exponent, a sign: far below this
YAML_DEPTH_MAX = 32
YAML_NODES_MAX = 100_000  # nodes after counting every alias as a copy (a spec has hundreds)
RECORD_MAX_BYTES = 16 << 20  # a record is a few kB; one with a long loss history, a few MB
LOG_MAX_BYTES = 256 << 20  # records.jsonl: about a hundred thousand records
SPEC_MAX_BYTES = 256 << 10  # a sweep spec is under 10 kB


class BadInput(ValueError):
    """The file is over its cap or not what its reader accepts; the message is one line."""


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, refused (:class:`BadInput`) before reading if over ``limit``.

    ``OSError`` (missing, unreadable) passes through: callers word those themselves.
    """
    with open(path, "rb", buffering=0) as handle:
        info = os.fstat(handle.fileno())
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise BadInput(f"is {info.st_size} bytes, over the {limit} this reader accepts")
        return read_at_most(handle, limit)


def read_at_most(handle: Any, limit: int) -> bytes:
    """All of ``handle`` if it holds at most ``limit`` bytes, else :class:`BadInput`.

    Read in chunks: ``read(limit + 1)`` would allocate the whole limit up front,
    whatever the file holds (a 9-byte file read with a 256 MiB limit costs 256 MiB).
    """
    chunks, total = [], 0
    while total <= limit:
        chunk = handle.read(min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise BadInput(f"is over the {limit} bytes this reader accepts")
    return b"".join(chunks)


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings, in one pass (no recursion)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > NUMBER_CHARS_MAX:
            raise BadInput(f"holds a number of {len(text)} characters")
        return kind(text)

    return parse


def loads_json(text: str | bytes, depth_max: int = JSON_DEPTH_MAX) -> Any:
    """``json.loads`` with the nesting and number checks above; :class:`BadInput` on failure."""
    if len(text) > 0 and json_depth(text) > depth_max:
        raise BadInput(f"nests deeper than {depth_max} levels")
    try:
        return json.loads(text, parse_int=_number(int), parse_float=_number(float))
    except BadInput:
        raise
    except json.JSONDecodeError as exc:
        raise BadInput(f"is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise BadInput(f"is not valid JSON ({type(exc).__name__})") from None


def read_json(path: Path, limit: int = RECORD_MAX_BYTES) -> Any:
    """One JSON document from ``path``: :func:`read_capped`, then :func:`loads_json`."""
    return loads_json(read_capped(path, limit))


def read_json_lines(path: Path, limit: int = LOG_MAX_BYTES) -> list[Any]:
    """Every line of a JSON-lines file that parses; a torn or bad line is skipped.

    The file as a whole is capped; each line is checked as :func:`loads_json` does.
    """
    found = []
    for line in read_capped(path, limit).splitlines():
        if not line.strip():
            continue
        try:
            found.append(loads_json(line))
        except BadInput:
            continue
    return found


# libyaml's parser when PyYAML was built with it (the wheels are): linear, and about ten
# times faster than the pure-Python one, which is used otherwise.
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _CheckedLoader(_SAFE_LOADER):
    """PyYAML's safe loader, with the composed node graph checked before construction."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_yaml_nodes(node)
        return super().construct_document(node)


def _check_yaml_nodes(root: yaml.Node) -> None:
    """Count nodes as construction would visit them (an alias's target once per use)."""
    seen: dict[int, int] = {}  # node id -> nodes under it, aliases counted in full

    def size(node: yaml.Node, depth: int) -> int:
        if depth > YAML_DEPTH_MAX:
            raise BadInput(f"nests deeper than {YAML_DEPTH_MAX} levels")
        key = id(node)
        if key in seen:
            return seen[key]
        seen[key] = 1  # a node that holds itself (an anchor inside itself) counts once
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child, depth + 1)
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                total += size(key_node, depth + 1) + size(value_node, depth + 1)
        if total > YAML_NODES_MAX:
            raise BadInput(f"stands for more than {YAML_NODES_MAX} YAML nodes (aliases counted)")
        seen[key] = total
        return total

    size(root, 0)


def _flow_depth(text: str) -> int:
    """The deepest run of open ``[`` and ``{`` (quotes not parsed: only ever an overcount)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def loads_yaml(text: str, limit: int = SPEC_MAX_BYTES) -> Any:
    """``yaml.safe_load`` with size, nesting, aliases and node count bounded (see module).

    PyYAML is pure Python (about a megabyte a second), so the size cap is also
    the time bound: at most ``limit`` characters.
    """
    if len(text) > limit:
        raise BadInput(f"is {len(text)} characters, over the {limit} this reader accepts")
    if _flow_depth(text) > YAML_DEPTH_MAX:  # PyYAML's scanner is quadratic in it
        raise BadInput(f"nests deeper than {YAML_DEPTH_MAX} levels")
    try:
        return yaml.load(text, Loader=_CheckedLoader)  # a SafeLoader: constructs no objects
    except BadInput:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or clip(str(exc), 60)
        raise BadInput(f"is not valid YAML{where} ({what})") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise BadInput(f"is not valid YAML ({type(exc).__name__}: {clip(str(exc), 40)})") from None


def read_yaml(path: Path, limit: int = SPEC_MAX_BYTES) -> Any:
    """One YAML document from ``path`` (UTF-8): :func:`read_capped`, then :func:`loads_yaml`."""
    data = read_capped(path, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"is not UTF-8 text (byte {brief(exc.start)})") from None
    return loads_yaml(text, limit)
