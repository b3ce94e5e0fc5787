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


def main() -> None:
    argument_spec = url_argument_spec()
    argument_spec.update(url={"type": "str", "required": True},
                         timeout={"type": "int", "default": 30},
                         max_bytes={"type": "int", "default": 1048576})
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    url = module.params["url"]
    response, info = fetch_url(module, url, timeout=module.params["timeout"])
    if response is None or info.get("status") != 200:
        module.fail_json(msg=f"Fetching {url} failed: HTTP {info.get('status')} "
                             f"{info.get('msg', '')}. Fix: check the key URL and that the host "
                             "reaches it.", status=info.get("status"))
    body = response.read(module.params["max_bytes"] + 1)
    if len(body) > module.params["max_bytes"]:
        module.fail_json(msg=f"{url} served more than {module.params['max_bytes']} bytes, which no "
                             "key file is. Fix: check the key URL.")
    module.exit_json(changed=False, content_base64=base64.b64encode(body).decode("ascii"),
                     size=len(body), status=200)


if __name__ == "__main__":
    main()
