"""The session computes the runs left; backends run them: no import goes back up.

``slurm.py`` imports ``session.py``; the session imports only ``slurm_queue.py``
(the queue guard and the task's slot), which imports neither. Every import is
counted, also those inside functions, which is where the old circle hid.
"""

from __future__ import annotations

import ast
from pathlib import Path

SWEEP = Path(__file__).resolve().parents[2] / "workloads" / "sweep"


def imported(module: str) -> set[str]:
    tree = ast.parse((SWEEP / f"{module}.py").read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name.rsplit(".", 1)[1] for name in names if name.startswith("workloads.sweep.")}


def test_the_session_imports_no_backend_and_the_queue_module_neither() -> None:
    assert "slurm" not in imported("session")
    assert "scheduler" in imported("session")  # the local backend, a plain function call
    assert {"session", "slurm"} & imported("slurm_queue") == set()
    assert "session" in imported("slurm")
