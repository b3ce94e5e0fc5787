#!/usr/bin/python
"""Ansible module: fetch a repository's key file, returned base64-encoded whatever it holds."""

from __future__ import annotations

import base64

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


def main() -> None:
    argument_spec = url_argument_spec()
    argument_spec.update(url={"type": "str", "required": True},
                         timeout={"type": "int", "default": 30},
                         max_bytes={"type": "int", "default": 1048576})
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    url = module.params["url"]
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    if response is None or info.get("status") != 200:
        module.fail_json(msg=f"Fetching {shown(url)} failed: HTTP {shown(info.get('status'), 12)} "
                             f"{shown(info.get('msg', ''))}. Fix: check the key URL and that the "
                             "host reaches it.", status=info.get("status"))
    body = response.read(module.params["max_bytes"] + 1)
    if len(body) > module.params["max_bytes"]:
        module.fail_json(msg=f"{shown(url)} served more than {module.params['max_bytes']} bytes, "
                             "which no key file is. Fix: check the key URL.")
    module.exit_json(changed=False, content_base64=base64.b64encode(body).decode("ascii"),
                     size=len(body), status=200)


if __name__ == "__main__":
    main()
