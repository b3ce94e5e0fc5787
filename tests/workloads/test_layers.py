"""The package's layers: imports run one way, and the battery's backend layers form no circle.

Read from the source with :mod:`ast` (every ``import`` and ``from … import``, at any depth,
so an import inside a function counts too): what the hardware is and can do
(:mod:`workloads.hardware`) is a lower layer than any check that uses it, and only the
battery itself may import :mod:`workloads.accept`.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "workloads"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, package: str = "workloads") -> set[str]:
    """Every module ``path`` imports, absolute names; ``from x import y`` gives x and x.y.

    ``package`` is the package ``path`` is in, for relative imports.
    """
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


@cache
def _graph() -> dict[str, frozenset[str]]:
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        graph[module] = frozenset(_imports(path, package))
    return graph


def test_nothing_outside_accept_imports_accept() -> None:
    offenders = {
        module: sorted(i for i in imports if i == "workloads.accept" or
                       i.startswith("workloads.accept."))
        for module, imports in _graph().items()
        if not (module == "workloads.accept" or module.startswith("workloads.accept."))
        and module != "workloads.cli"  # the CLI names each command's module, as a string
    }
    # The fleet report judges each record's NVLinks by the battery's own rule, so the two
    # cannot disagree: that one module (and what it imports) is the fleet's to call.
    offenders["workloads.fleet.load"] = [
        i for i in offenders.get("workloads.fleet.load", [])
        if i not in ("workloads.accept", "workloads.accept.links")]
    assert {m: i for m, i in offenders.items() if i} == {}


def test_the_hardware_layer_imports_no_check_or_workload() -> None:
    # the choke points (reading, writing, printing) sit below every layer, the hardware's too
    allowed = ("workloads.hardware", "workloads.errors", "workloads.envinfo", "workloads.safefs",
               "workloads.bounded", "workloads.printable")
    for module, imports in _graph().items():
        if not module.startswith("workloads.hardware"):
            continue
        upward = sorted(
            i for i in imports if i.startswith("workloads") and not i.startswith(allowed)
        )
        assert upward == [], f"{module} imports {upward}"


def test_the_battery_modules_form_no_circle() -> None:
    modules = set(_graph())
    graph = {m: {i for i in imports if i in modules} for m, imports in _graph().items()}
    accept = {m for m in graph if m.startswith("workloads.accept")}
    for start in sorted(accept):
        seen: set[str] = set()
        stack = [n for n in graph[start] if n in accept]
        while stack:
            node = stack.pop()
            assert node != start, f"{start} imports itself back through {sorted(seen)}"
            if node in seen:
                continue
            seen.add(node)
            stack.extend(n for n in graph[node] if n in accept)


def test_the_import_reader_sees_a_function_level_import(tmp_path: Path) -> None:
    """The reader must see imports inside functions: most of this package's are there."""
    source = tmp_path / "probe.py"
    source.write_text("def f():\n    from workloads.accept.nvml import open_nvml\n")
    assert "workloads.accept.nvml" in _imports(source)
