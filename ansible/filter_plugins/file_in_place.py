"""Ansible filter: is a managed file already as a template or copy task would leave it?

Why: a template or copy task asks the host twice even when nothing changes (the stat of
the destination, then the file module for its attributes). A role that surveys its files
with one `file_state` run (ansible/library/file_state.py) runs the task only where this
filter says the file differs; where it says "in place", the task would have reported ok.

    when: not (files.files | file_in_place(path, lookup('ansible.builtin.template', 'x.j2')))

In place means: a regular file (not a symlink), its SHA-1 that of `content`, and the owner,
group and mode given (each compared only when given, as the task leaves unset ones alone).
Anything else (absent, another type, no survey of that path) is "not in place": the task
runs and decides, so a mistake here costs a module run, never a skipped change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any


def file_in_place(files: dict[str, Any], path: str, content: str, mode: str | None = None,
                  owner: str | None = None, group: str | None = None) -> bool:
    """Whether `path`, as `file_state` saw it, holds `content` with these attributes."""
    state = files.get(path) if isinstance(files, dict) else None
    if not isinstance(state, dict) or not state.get("exists") or state.get("type") != "file":
        return False
    if state.get("checksum") != hashlib.sha1(str(content).encode("utf-8")).hexdigest():
        return False
    wanted = {"mode": mode, "owner": owner, "group": group}
    return all(value is None or str(state.get(key)) == str(value).zfill(4 if key == "mode" else 0)
               for key, value in wanted.items())


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"file_in_place": file_in_place}
