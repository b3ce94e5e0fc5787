"""Draining a node that fails its health check, and resuming only the ones this check drained.

SLURM runs ``HealthCheckProgram`` as root on every node and leaves any action to it
("Any action to be taken must be explicitly performed by the program (e.g. execute
``scontrol update NodeName=foo State=drain Reason=tmp_file_system_full``)", slurm.conf(5)).
So after a failing run this module drains the node with the first finding as the reason,
prefixed :data:`PREFIX`; after a passing run it resumes the node only if it is drained AND
its reason starts with that prefix: a node an administrator drained for another reason
(maintenance, a bad DIMM) stays drained whatever the health check sees, and a node whose
failure an administrator already explained is not overwritten either.

``scontrol`` gets its arguments as a list (no shell), each call a timeout, and the reason
only characters that mean nothing to a shell or to scontrol's ``key=value`` parsing.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass

from workloads.errors import WorkloadError

PREFIX = "workloads-health:"
MAX_REASON = 120
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_UNSAFE = re.compile(r"[^A-Za-z0-9 .,:()/#+_-]+")


@dataclass(frozen=True)
class NodeState:
    state: str  # scontrol's State=, e.g. IDLE+DRAIN
    reason: str | None  # Reason= without its [user@time] suffix

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()

    @property
    def ours(self) -> bool:
        return self.drained and (self.reason or "").startswith(PREFIX)


def node_name(given: str | None = None) -> str:
    """``--node``, else ``SLURMD_NODENAME`` (what slurmd sets), else ``hostname -s``."""
    name = given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not NODE_NAME.fullmatch(name):
        raise WorkloadError(
            f"node name {name[:70]!r} is not a SLURM node name",
            "give --node NAME (letters, digits, '.', '_', '-')",
        )
    return name


def reason(text: str) -> str:
    """``PREFIX`` + ``text`` made safe for scontrol: limited characters, one line, short."""
    body = " ".join(_UNSAFE.sub(" ", text).split())
    full = f"{PREFIX} {body}"
    return full if len(full) <= MAX_REASON else full[: MAX_REASON - 3].rstrip() + "..."


def scontrol() -> str:
    found = shutil.which("scontrol")
    if found is None:
        raise WorkloadError(
            "--slurm needs scontrol, and it is not on PATH",
            "install SLURM's client commands on the node, or run without --slurm",
        )
    return found


def _run(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(
            [scontrol(), *args], capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise WorkloadError(
            f"scontrol {args[0]} did not answer within {timeout:.0f} s",
            "check that slurmctld is reachable from this node",
        ) from None


def show(node: str, timeout: float = 10.0) -> NodeState:
    """The node's state and reason, from ``scontrol show node``."""
    done = _run(["show", "node", node], timeout)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise WorkloadError(
            f"scontrol show node {node} failed: {said[-1] if said else done.returncode}",
            "check the node name (--node) and SLURM_CONF",
        )
    return parse_show(done.stdout)


def parse_show(text: str) -> NodeState:
    """``State=`` and ``Reason=`` of ``scontrol show node`` (one node, multi-line form)."""
    state = re.search(r"\bState=(\S+)", text)
    found = re.search(r"^\s*Reason=(.*?)(?:\s+\[[^\]@]*@[^\]]*\])?\s*$", text, re.MULTILINE)
    return NodeState(state[1] if state else "UNKNOWN", found[1] if found else None)


def drain(node: str, why: str, timeout: float = 10.0) -> None:
    _update(node, ["state=drain", f"reason={why}"], timeout)


def resume(node: str, timeout: float = 10.0) -> None:
    _update(node, ["state=resume"], timeout)


def _update(node: str, changes: list[str], timeout: float) -> None:
    done = _run(["update", f"nodename={node}", *changes], timeout)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise WorkloadError(
            f"scontrol update nodename={node} {changes[0]} failed: "
            f"{said[-1] if said else done.returncode}",
            "the health check runs as root from slurmd; run it as root, with SLURM_CONF set",
        )


def act(node: str, failed: bool, why: str, timeout: float = 10.0) -> str:
    """Drain or resume ``node`` as the run found; returns what was done, in words."""
    current = show(node, timeout)
    if failed:
        if current.drained and not current.ours:
            return f"{node} already drained by someone else ({current.reason}): left as it is"
        if current.ours and current.reason == why:
            return f"{node} stays drained: {why}"
        drain(node, why, timeout)
        return f"{node} drained: {why}"
    if current.ours:
        resume(node, timeout)
        return f"{node} resumed (was drained by this health check: {current.reason})"
    if current.drained:
        return f"{node} passes, but stays drained: someone else drained it ({current.reason})"
    return f"{node} passes ({current.state})"
