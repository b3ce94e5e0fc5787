"""DCGM's own verdict: ``dcgmi diag -r LEVEL -j``, one finding per failed or warned test.

Run before the battery touches a GPU: DCGM's diagnostics want the GPUs to
themselves, and a framework keeps its contexts open until the process ends.
The JSON layout differs between DCGM 3 and 4, so the parser walks the document
for test entries (a ``name`` with ``results`` or a ``status``) instead of
following one version's path; levels: 1 seconds, 2 about 2 minutes, 3 about 15
minutes, 4 longer (DCGM's documentation).
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from workloads.accept.verdicts import FAIL, PASS, SKIP, WARN, Finding
from workloads.bounded import loads_json

DCGM_OUTPUT_MAX = 16 << 20  # dcgmi diag -j: tens of kB for eight GPUs at level 4

TIMEOUT_S = {1: 300, 2: 900, 3: 3600, 4: 10800}
STATUS = {"pass": PASS, "fail": FAIL, "warn": WARN, "warning": WARN, "skip": SKIP,
          "skipped": SKIP, "not run": SKIP}
# From this level on the diagnostic is the stress tests (targeted stress, power, memory
# bandwidth, ...: DCGM's documentation); a test skipped there, or no DCGM at all, leaves the
# run without what it was asked for, so it is a warn, never a quiet pass.
DEEP_LEVEL = 3


def run_diag(level: int, dcgmi: str | None = None) -> list[Finding]:
    """Run the diagnostic at ``level`` and judge it; a skip row when DCGM is not installed."""
    command = dcgmi or shutil.which("dcgmi")
    item = f"diag level {level}"
    if command is None:
        if level >= DEEP_LEVEL:
            return [Finding("dcgm", "host", item, WARN, f"ran without DCGM (no dcgmi on PATH): "
                            f"the level {level} diagnostics (stress tests) were not run, so "
                            "this is not a pass of DCGM; install datacenter-gpu-manager and run "
                            "again")]
        return [
            Finding(
                "dcgm",
                "host",
                item,
                SKIP,
                "DCGM not installed (no dcgmi on PATH): nothing to ask it",
            )
        ]
    try:
        done = subprocess.run(
            [command, "diag", "-r", str(level), "-j"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S[level],
            check=False,
        )
    except subprocess.TimeoutExpired:
        return [
            Finding(
                "dcgm",
                "host",
                item,
                WARN,
                f"dcgmi diag -r {level} did not finish in {TIMEOUT_S[level]} s; "
                "run it by hand to see where it stops",
            )
        ]
    except OSError as exc:
        return [Finding("dcgm", "host", item, WARN, f"cannot run {command}: {exc.strerror}")]
    try:
        if len(done.stdout) > DCGM_OUTPUT_MAX:
            raise ValueError("dcgmi's output is larger than any diagnostic's")
        document = loads_json(done.stdout)
    except ValueError:
        said = " ".join((done.stderr or done.stdout).split())[:160] or f"exit {done.returncode}"
        return [
            Finding(
                "dcgm",
                "host",
                item,
                WARN,
                f"dcgmi diag gave no verdict ({said}); is nv-hostengine running? "
                "(systemctl status nvidia-dcgm)",
            )
        ]
    return judge(document, level)


def judge(document: Any, level: int) -> list[Finding]:
    """Findings from a ``dcgmi diag -j`` document: the failed and warned tests, or one pass."""
    item = f"diag level {level}"
    bad: list[Finding] = []
    skipped: list[Finding] = []
    passed = 0
    for test, status, gpu, info in _entries(document):
        verdict = STATUS.get(status.lower())
        device = f"GPU {gpu}" if gpu not in (None, "") else "host"
        if verdict == PASS:
            passed += 1
        elif verdict in (FAIL, WARN):
            text = f"{test}: {status}" + (f" ({info})" if info else "")
            bad.append(Finding("dcgm", device, item, verdict, text[:300]))
        elif verdict == SKIP:
            text = (f"{test}: skipped by DCGM at level {level}" + (f" ({info})" if info else "")
                    + ": not run, so not passed")
            skipped.append(Finding("dcgm", device, item, WARN if level >= DEEP_LEVEL else SKIP,
                                   text[:300]))
    rows = bad + skipped
    if passed and not bad:
        also = f"; {len(skipped)} skipped (named above)" if skipped else ""
        rows.append(Finding("dcgm", "host", item, PASS, f"{passed} test results passed{also}"))
    if not rows:
        return [
            Finding(
                "dcgm", "host", item, WARN, "dcgmi diag returned no test results; run it by hand"
            )
        ]
    return rows


def _entries(node: Any, test: str = "") -> Iterator[tuple[str, str, Any, str]]:
    """``(test name, status, gpu id, first warning)`` for every result in the document."""
    if isinstance(node, list):
        for child in node:
            yield from _entries(child, test)
        return
    if not isinstance(node, dict):
        return
    name = node.get("name") or node.get("test_name") or test
    status = node.get("status")
    if isinstance(status, str) and ("results" not in node or not node["results"]):
        gpu = node.get("gpu_id", node.get("gpu_ids", node.get("entity_id")))
        yield str(name), status, gpu, _first_warning(node)
    for child in node.values():
        if isinstance(child, (dict, list)):
            yield from _entries(child, str(name))


def _first_warning(node: dict[str, Any]) -> str:
    for key in ("warnings", "warning", "info"):
        value = node.get(key)
        if isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, dict):
            value = value.get("warning") or value.get("message") or ""
        if isinstance(value, str) and value:
            return " ".join(value.split())[:200]
    return ""
