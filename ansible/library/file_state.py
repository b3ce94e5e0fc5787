#!/usr/bin/python
"""Ansible module: the state of several paths (type, owner, mode, checksum) in one module run."""

from __future__ import annotations

import base64
import grp
import hashlib
import os
import pwd
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: file_state
short_description: The state of several paths in one module run, changing nothing
description:
  - For each path, what C(ansible.builtin.stat) with C(follow=false) says of it - whether it
    exists, its type, owner, group and mode, and the SHA-1 of a regular file - and, for the
    paths in C(read), its content (base64), as C(ansible.builtin.slurp) would give it.
  - Why - a role that manages several files otherwise asks the host once per file, and a
    template or copy asks twice (the stat of the destination, then the file module for its
    attributes) even when nothing changes. With one survey the role writes only what differs
    (the C(file_in_place) filter compares a rendered template with it), and an idle re-run
    makes one module run where it made one or two per file.
  - Read-only, in check mode too.
options:
  paths:
    description: The paths to look at (not followed when they are symlinks).
    type: list
    elements: path
    required: true
  read:
    description: Paths (among C(paths)) whose content to return, when a regular file.
    type: list
    elements: path
    default: []
  max_bytes:
    description: A larger file is not read (no C(content); C(too_large) is true).
    type: int
    default: 1048576
"""

EXAMPLES = r"""
- name: Look at the role's files
  file_state:
    paths: [/etc/apt/sources.list.d/nvidia-cuda.list, /etc/docker/daemon.json]
    read: [/etc/docker/daemon.json]
  register: files
"""

RETURN = r"""
files:
  description: >-
    Path to C(exists), and where it exists C(type) (file, directory, link or other), C(owner),
    C(group), C(uid), C(gid), C(mode) (four octal digits), C(size); C(lnk_source) of a symlink
    (where it leads, as stat says it); C(checksum) (SHA-1) of a regular file; C(content)
    (base64) of a regular file named in C(read), or C(too_large).
  returned: always
  type: dict
"""


def _name(lookup: Any, number: int) -> str:
    try:
        return str(lookup(number)[0])
    except KeyError:
        return str(number)


def _type(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "link"
    return "other"


def path_state(module: AnsibleModule, path: str, read: bool, max_bytes: int) -> dict[str, Any]:
    """One path's state, as stat (follow=false) and slurp report it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    except OSError as error:  # a directory on the way that is not one, or not readable
        module.fail_json(msg=f"cannot look at {path}: {error.strerror}")
    state: dict[str, Any] = {
        "exists": True, "type": _type(info.st_mode),
        "owner": _name(pwd.getpwuid, info.st_uid), "group": _name(grp.getgrgid, info.st_gid),
        "uid": info.st_uid, "gid": info.st_gid,
        "mode": f"{stat.S_IMODE(info.st_mode):04o}", "size": info.st_size,
    }
    if state["type"] == "link":
        state["lnk_source"] = os.path.realpath(path)  # where it leads, as stat's lnk_source
    if state["type"] != "file":
        return state
    try:
        seen = _read_same_file(path, info, max_bytes if read else None)
    except PermissionError:
        if read:
            module.fail_json(msg=f"cannot read {path}: permission denied")
        return state  # no checksum, as stat gives none for a file it cannot read
    if seen is None:
        module.fail_json(msg=f"{path} changed while it was read (replaced, or made a link "
                             "or another kind of file); run the play again")
    else:
        state["checksum"], content = seen
        if read and content is None:
            state["too_large"] = True
        elif read and content is not None:
            state["content"] = base64.b64encode(content).decode("ascii")
    return state


def _read_same_file(path: str, seen: os.stat_result,
                    max_bytes: int | None) -> tuple[str, bytes | None] | None:
    """The SHA-1 of the file's bytes, and the bytes themselves where `max_bytes` is given and
    they fit, only if what opens is the regular file lstat saw: opened without following a
    link and without blocking on a FIFO, then compared by device and inode (a user's
    ~/.docker/config.json swapped for a link to /etc/shadow, or for a FIFO, between the two
    is neither hashed nor read, nor waited on). None if it is not that file; PermissionError
    if the file cannot be opened for reading."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                             | getattr(os, "O_CLOEXEC", 0))
    except PermissionError:
        raise
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        opened = os.fstat(handle.fileno())
        if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (
                seen.st_dev, seen.st_ino):
            return None
        digest = hashlib.sha1()  # stat's checksum (SHA-1), not a signature
        limit = -1 if max_bytes is None else max_bytes
        kept: bytearray | None = bytearray() if limit >= 0 else None
        while chunk := handle.read(65536):
            digest.update(chunk)
            if kept is not None:
                kept.extend(chunk)
                if len(kept) > limit:
                    kept = None
        return digest.hexdigest(), None if kept is None else bytes(kept)


def main() -> None:
    module = AnsibleModule(argument_spec={
        "paths": {"type": "list", "elements": "path", "required": True},
        "read": {"type": "list", "elements": "path", "default": []},
        "max_bytes": {"type": "int", "default": 1048576},
    }, supports_check_mode=True)
    paths: list[str] = module.params["paths"]
    read = set(module.params["read"])
    unknown = sorted(read.difference(paths))
    if unknown:
        module.fail_json(msg=f"read names paths not in paths: {', '.join(unknown)}")
    files = {path: path_state(module, path, path in read, module.params["max_bytes"])
             for path in paths}
    module.exit_json(changed=False, files=files)


if __name__ == "__main__":
    main()
