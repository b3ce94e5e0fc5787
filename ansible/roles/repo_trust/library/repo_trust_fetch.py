#!/usr/bin/python
"""Ansible module: fetch a repository's key file, returned base64-encoded whatever it holds."""

from __future__ import annotations

import base64
import grp
import http.client
import os
import pwd
import signal
import stat
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url, url_argument_spec

DOCUMENTATION = r"""
---
module: repo_trust_fetch
short_description: Fetch a repository's OpenPGP key file, as base64
description:
  - Why not C(ansible.builtin.uri) with C(return_content) - it returns the body as text, and a
    binary key file (a C(.gpg) keyring, or anything a mirror serves) is not UTF-8, which Ansible
    refuses to carry back from the host. repo_trust must read every byte of what was served to
    refuse what it cannot account for, so the body comes back base64-encoded and the key filter
    decodes it.
  - Uses Ansible's own URL fetching (proxies, certificates, C(validate_certs)). Changes nothing.
  - The whole fetch (connect, status line, headers and body) ends within O(deadline) seconds,
    however slowly the server answers - C(timeout) bounds each read of the socket only, and a
    server that sends one byte per read keeps a fetch going for ever without this.
options:
  url:
    description: The key file's URL.
    type: str
    required: true
  timeout:
    description: Seconds to wait for the server.
    type: int
    default: 30
  max_bytes:
    description: Refuse a larger body (a key file is a few kilobytes).
    type: int
    default: 1048576
  deadline:
    description: Seconds the whole fetch may take (a key file of a few kilobytes takes one).
    type: int
    default: 120
  installed:
    description: >-
      The installed key file's path: described in the same module run (C(installed) in the
      result), so the role compares it with the checked key without a stat of its own.
    type: path
extends_documentation_fragment: [ansible.builtin.url]
author: tf-gpu-host
"""

RETURN = r"""
content_base64:
  description: The body, base64-encoded.
  type: str
  returned: success
size:
  description: The body's length in bytes.
  type: int
  returned: success
installed:
  description: >-
    The file at C(installed), as C(ansible.builtin.stat) (not following a symlink) with
    C(checksum_algorithm=sha256) describes it - C(exists), C(islnk), C(mode), C(pw_name),
    C(gr_name), and a regular file's C(checksum).
  type: dict
  returned: when C(installed) is given
"""


REASON_MAX = 120  # the reason phrase shown: a server's is a few words


def shown(text: object, limit: int = REASON_MAX) -> str:
    """What the key server said (its reason phrase), as one printable line of at most ``limit``.

    The same rule as ``workloads/printable.py`` (a module runs alone on the host and
    can import nothing of ``workloads``; ``tests/test_choke_points.py`` checks that
    the two agree): every character Python does not call printable (ESC, BEL, the C1
    controls 0x80-0x9f, bidi overrides, line breaks) becomes its escape (``\\x1b``),
    a backslash ``\\\\``, and a longer text keeps its start, ``...`` and its end.
    Ansible prints the failure message to the terminal as it is.
    """
    raw = text if isinstance(text, str) else str(text)
    if len(raw) > 4 * limit:
        head, tail = raw[:2 * limit], raw[-2 * limit:]
        out = "".join(map(_escape, head)) + "..." + "".join(map(_escape, tail))
    else:
        out = "".join(map(_escape, raw))
    if len(out) <= limit:
        return out
    if limit <= 3:
        return out[:limit]
    kept = (limit - 3) // 3
    rest = limit - 3 - kept
    return out[:kept] + "..." + (out[-rest:] if rest else "")


def _escape(char: str) -> str:
    if char == "\\":
        return "\\\\"
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class _Expired(BaseException):
    """The fetch ran past its deadline (raised from SIGALRM, in the module's main thread).

    A BaseException: ``fetch_url`` turns any ``Exception`` into its own "unknown
    error" with a traceback, and this one must reach :func:`main` as it is.
    """


def _expire(_signum: int, _frame: Any) -> None:
    raise _Expired


def _fetch(module: AnsibleModule, url: str, max_bytes: int) -> bytes:
    """The body of ``url``, at most ``max_bytes``; every failure is ``fail_json``, one line."""
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    if response is None or info.get("status") != 200:
        module.fail_json(msg=f"Fetching {shown(url)} failed: HTTP {shown(info.get('status'), 12)} "
                             f"{shown(info.get('msg', ''))}. Fix: check the key URL and that the "
                             "host reaches it.", status=info.get("status"))
    chunks, total = [], 0
    while total <= max_bytes:  # in pieces: read(n) would allocate n up front
        chunk = response.read(min(1 << 16, max_bytes + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def describe(module: AnsibleModule, path: str) -> dict[str, Any]:
    """The installed key file, as stat (follow=false, checksum_algorithm=sha256) says it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return {"exists": False}
    except OSError as error:
        module.fail_json(msg=f"Cannot look at {path}: {error.strerror}")
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    described: dict[str, Any] = {"exists": True, "islnk": stat.S_ISLNK(info.st_mode),
                                 "mode": f"{stat.S_IMODE(info.st_mode):04o}",
                                 "pw_name": owner, "gr_name": group}
    if stat.S_ISREG(info.st_mode):
        described["checksum"] = module.digest_from_file(path, "sha256")
    return described


def main() -> None:
    argument_spec = url_argument_spec()
    argument_spec.update(url={"type": "str", "required": True},
                         timeout={"type": "int", "default": 30},
                         max_bytes={"type": "int", "default": 1048576},
                         deadline={"type": "int", "default": 120},
                         installed={"type": "path"})
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    url = module.params["url"]
    max_bytes = module.params["max_bytes"]
    deadline = module.params["deadline"]
    if deadline <= 0:
        module.fail_json(msg=f"deadline={deadline} is not a number of seconds > 0. Fix: give "
                             "repo_trust_fetch a deadline of e.g. 120.")
    previous = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, deadline)
    try:
        body = _fetch(module, url, max_bytes)
    except _Expired:
        module.fail_json(msg=f"Fetching {shown(url)} took more than {deadline} s (the server "
                             "answers too slowly). Fix: check the key URL, or raise "
                             "repo_trust_fetch's deadline.")
    except (http.client.HTTPException, OSError, ValueError) as exc:
        module.fail_json(msg=f"Fetching {shown(url)} failed: the server's response broke off or "
                             f"is not HTTP ({type(exc).__name__}). Fix: check the key URL.")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    if len(body) > max_bytes:
        module.fail_json(msg=f"{shown(url)} served more than {max_bytes} bytes, which no "
                             "key file is. Fix: check the key URL.")
    result: dict[str, Any] = {"content_base64": base64.b64encode(body).decode("ascii"),
                              "size": len(body), "status": 200}
    if module.params["installed"]:
        result["installed"] = describe(module, module.params["installed"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
