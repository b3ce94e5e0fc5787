"""Which of a fleet verdict's `fail` lines come from the comparison rules (noise can trip them).

The fleet test's healthy stand-ins are identical containers on a shared machine: one may come
out 30 % below its siblings or below its own first record (its baseline) by noise, and the
rules are right to fail it then. Any other `fail` line (a check that failed, a record called
incomplete) is a defect. The rules word their lines four ways (workloads/fleet/reasons.py):

* one figure below the group: "... 1.867 GB/s is 41% below its group's 2.189 (the median ...)"
* several, folded: "GPU 3: 31 % below its group on all 4 checks"
* one figure below the baseline: "membw copy 32 MiB: 30.43 GB/s, 45% below 55.16 of its
  baseline of 2026-11-29T02:24:52Z"
* several, folded: "GPUs 0–1 and the host: 40 % below its baseline of ... on all 7 checks"
"""

from __future__ import annotations

import re

_BY_THE_RULES = re.compile(r"below (its group|its baseline|\S+ of its baseline)")


def fails_by_the_rules(reason: str) -> bool:
    """Whether a `fail: ...` line is the group's or the baseline's comparison."""
    return bool(_BY_THE_RULES.search(reason))
