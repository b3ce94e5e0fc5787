"""Load one of the roles' filter plugins or modules as a plain Python module, for its unit tests.

Why not import it: ansible/filter_plugins and the library/ folders are not packages, and
Ansible loads each file by path; the tests do the same, so they test the file the play runs.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.ansible.playbook import ANSIBLE_DIR


def load_plugin(file_name: str, role: str | None = None) -> ModuleType:
    """ansible/filter_plugins/<file_name> (a role's own: roles/<role>/filter_plugins), executed
    as a module of its own and registered under its name (dataclasses look it up there)."""
    folder = ANSIBLE_DIR / "roles" / role if role else ANSIBLE_DIR
    return _load(folder / "filter_plugins" / file_name, f"filter_plugin_{role or 'play'}_")


def load_library_module(file_name: str, role: str | None = None) -> ModuleType:
    """ansible/library/<file_name> (a role's own: roles/<role>/library), the same way."""
    folder = ANSIBLE_DIR / "roles" / role if role else ANSIBLE_DIR
    return _load(folder / "library" / file_name, "")


def _load(path: Path, prefix: str) -> ModuleType:
    name = f"{prefix}{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def load_filters(file_name: str, role: str | None = None) -> dict[str, Callable[..., Any]]:
    """The filters that file's FilterModule registers, by the names the play uses."""
    filters: dict[str, Callable[..., Any]] = load_plugin(file_name, role).FilterModule().filters()
    return filters
