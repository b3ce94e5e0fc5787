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

`file_state_as_stat` gives one path of the look in stat's keys (exists, islnk, isdir, isreg,
pw_name, gr_name, mode, lnk_source), for tasks written against a stat's result.
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


def file_state_as_stat(state: dict[str, Any]) -> dict[str, Any]:
    """One path of a `file_state` look in the keys `ansible.builtin.stat` (follow=false) uses."""
    if not isinstance(state, dict) or not state.get("exists"):
        return {"exists": False}
    kind = state.get("type")
    described = {"exists": True, "islnk": kind == "link", "isdir": kind == "directory",
                 "isreg": kind == "file", "pw_name": state.get("owner"),
                 "gr_name": state.get("group"), "mode": state.get("mode")}
    if kind == "link":
        described["lnk_source"] = state.get("lnk_source")
    return described


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"file_in_place": file_in_place, "file_state_as_stat": file_state_as_stat}
