"""Load one of the roles' filter plugins as a plain module, for its unit tests.

Why not import it: ansible/filter_plugins is not a package, and Ansible loads each
file by path; the tests do the same, so they test the file the play runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from tests.ansible.playbook import ANSIBLE_DIR


def load_plugin(file_name: str) -> ModuleType:
    """ansible/filter_plugins/<file_name>, executed as a module of its own."""
    path = ANSIBLE_DIR / "filter_plugins" / file_name
    spec = importlib.util.spec_from_file_location(f"filter_plugin_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_filters(file_name: str) -> dict[str, Callable[..., Any]]:
    """The filters that file's FilterModule registers, by the names the play uses."""
    filters: dict[str, Callable[..., Any]] = load_plugin(file_name).FilterModule().filters()
    return filters
