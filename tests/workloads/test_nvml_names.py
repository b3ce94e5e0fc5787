"""No NVML enum or bit is written as a number in ``workloads/``: each is nvidia-ml-py's name.

Read from the source with :mod:`ast`, in every module that talks to NVML (one that imports
``pynvml`` or calls ``nvml…`` functions): no integer literal is passed to an NVML query
(directly, or through the ``_read(nvml, "nvml…", handle, …)`` helper), none is a key of a
table of NVML values, and none is OR-ed into a bit mask. A number there would be a
reading of NVML that a reviewer cannot check against ``nvml.h``, which is how
``nvmlDeviceGetNvLinkVersion``'s enum came to be read as a generation.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "workloads"


def _talks_to_nvml(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
            if any(n.split(".")[0] == "pynvml" for n in names):
                return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("nvmlDevice")
        ):
            return True
    return False


def _name(func: ast.expr) -> str:
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _is_int(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    )


def numbers_standing_for_nvml_values(source: str) -> list[str]:
    """Each integer literal in an NVML position, as ``line: what``."""
    tree = ast.parse(source)
    if not _talks_to_nvml(tree):
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _name(node.func)
            args = list(node.args)
            reader = name in ("_read", "read_or_none")
            if reader and len(args) >= 2 and isinstance(args[1], ast.Constant):
                args = args[3:]  # _read(nvml, "nvmlX", handle, *the query's own args)
            elif not name.startswith("nvml"):
                continue
            found += [f"{node.lineno}: {name}(… {ast.unparse(a)} …)" for a in args if _is_int(a)]
        elif isinstance(node, ast.Dict):
            found += [f"{node.lineno}: table key {ast.unparse(k)}" for k in node.keys
                      if k is not None and _is_int(k)]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            found += [f"{node.lineno}: mask bit {ast.unparse(side)}"
                      for side in (node.left, node.right) if _is_int(side)]
    return found


def test_no_nvml_value_is_a_number_in_the_package() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = numbers_standing_for_nvml_values(path.read_text())
        if found:
            offenders[str(path.relative_to(PACKAGE.parent))] = found
    assert offenders == {}


def test_the_scan_finds_the_old_shapes() -> None:
    """What the code held before: a reason table keyed by bits, a mask, a numeric sensor."""
    before = (
        "import pynvml\n"
        "REASON_NAMES = {0x1: 'GPU idle', 0x8: 'hardware slowdown'}\n"
        "HARDWARE = 0x8 | 0x40\n"
        "def read(nvml, h):\n"
        "    nvml.nvmlDeviceGetTemperature(h, 0)\n"
        "    return _read(nvml, 'nvmlDeviceGetClockInfo', h, 1)\n"
    )
    found = numbers_standing_for_nvml_values(before)
    assert len(found) == 6, found
    after = (
        "import pynvml\n"
        "REASON_NAMES = {pynvml.nvmlClocksEventReasonGpuIdle: 'GPU idle'}\n"
        "def read(nvml, h):\n"
        "    return _read(nvml, 'nvmlDeviceGetClockInfo', h, pynvml.NVML_CLOCK_SM)\n"
    )
    assert numbers_standing_for_nvml_values(after) == []
