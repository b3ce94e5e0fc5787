#!/usr/bin/python
"""Ansible module: run `apt-get update` unless apt's indexes are fresh, and return what apt said.

Why not the apt module's `update_cache`: it retries every failure five times with growing
pauses (about half a minute, a warning per try), a refused signature too, which no retry
can change, and then reports the failure without saying which kind it was. This module
runs apt-get once and returns its exit status and messages; the caller's task decides
with the `apt_update_problem` filter (filter_plugins/apt_update.py) whether a retry can
help (a failed download) or the play must stop now (a repository apt refused), so one
rule reads apt's messages for every refresh the roles make.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: apt_get_update
short_description: Read apt's indexes (every source) unless they are fresh, returning apt's messages
description:
  - Runs C(apt-get update) in the C.UTF-8 locale (apt's English messages, which the
    C(apt_update_problem) filter reads) and returns its exit status, stdout and stderr. Never
    fails on apt's exit status - the caller classifies the result.
  - With C(max_age) above 0, does nothing when apt's indexes were read less than that many
    seconds ago - the same test as the apt module's C(cache_valid_time) (the mtime of
    C(/var/lib/apt/periodic/update-success-stamp), else of C(/var/lib/apt/lists)).
  - A password in a source's URI (C(https://user:secret@host/...), where apt's auth.conf is the
    documented place) is replaced by C(***) in what the module returns, so that apt's lines can
    be shown in the play's messages and logs.
  - Not run in check mode (it would change the host's indexes).
options:
  max_age:
    description: Seconds for which indexes read earlier count as fresh; 0 reads them always.
    type: int
    default: 0
author: tf-gpu-host
"""

EXAMPLES = r"""
- name: Read apt's indexes (unless read in the last hour)
  apt_get_update:
    max_age: 3600
  register: update
  until: (update | apt_update_problem).kind != 'fetch'
  retries: 3
  delay: 5
"""

RETURN = r"""
rc:
  description: apt-get's exit status (0 as well when the indexes were fresh).
  type: int
stdout:
  description: What apt-get printed.
  type: str
stderr:
  description: apt-get's error stream (its E/W lines).
  type: str
fresh:
  description: True when the indexes were fresh and apt-get did not run.
  type: bool
msg:
  description: apt-get's exit status in words, or that the indexes were fresh.
  type: str
"""

# Where apt (update-notifier's hook, the apt module) and apt-get record the last read.
STAMPS = ("/var/lib/apt/periodic/update-success-stamp", "/var/lib/apt/lists")


# scheme://user:password@ (or scheme://token@): what apt's lines may quote from a sources entry.
_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s]+@")


def redact(text: str) -> str:
    """apt's output with the credentials of every URI in it replaced by ***."""
    return _CREDENTIALS.sub(r"\1***@", text)


def indexes_age(now: float, stamps: tuple[str, ...] = STAMPS) -> float | None:
    """Seconds since apt last read its indexes, by the first stamp that exists; None if none."""
    for stamp in stamps:
        try:
            return now - os.stat(stamp).st_mtime
        except OSError:
            continue
    return None


def is_fresh(age: float | None, max_age: int) -> bool:
    """Whether indexes `age` seconds old need no new read (a stamp from the future does)."""
    return max_age > 0 and age is not None and 0 <= age < max_age


def main() -> None:
    module = AnsibleModule(argument_spec={"max_age": {"type": "int", "default": 0}},
                           supports_check_mode=False)
    if is_fresh(indexes_age(time.time()), module.params["max_age"]):
        module.exit_json(changed=False, fresh=True, rc=0, stdout="", stderr="",
                         msg=f"apt's indexes are younger than {module.params['max_age']} s")
    rc, stdout, stderr = module.run_command(["apt-get", "update"],
                                            environ_update={"LC_ALL": "C.UTF-8"})
    # Said here: without a msg, Ansible writes "Action failed: Unknown error" beside rc != 0.
    result: dict[str, Any] = {"rc": rc, "stdout": redact(stdout), "stderr": redact(stderr),
                              "fresh": False, "msg": f"apt-get update exited {rc}"}
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
