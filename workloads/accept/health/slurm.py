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
import time
from dataclasses import dataclass

from workloads.errors import WorkloadError

PREFIX = "workloads-health:"
# Slurm keeps a reason whole (22.05 stored 500 characters here); the limit is ours, so a reason
# reads in one line of `sinfo -R -o "%n %160E"` and in alert mail. scripts/slurm/health-check.sh
# uses the same figure for the reasons it writes itself.
MAX_REASON = 160
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_UNSAFE = re.compile(r"[^A-Za-z0-9 .,:()/#+_-]+")
# Node states whose owner is someone else: a node that is DOWN or FAIL, or has a reboot pending
# (scontrol reboot: REBOOT_REQUESTED, then REBOOT_ISSUED), or is powered down by the power saver.
LEFT_ALONE = ("DOWN", "FAIL", "REBOOT", "POWER")


@dataclass(frozen=True)
class NodeState:
    state: str  # scontrol's State=, e.g. IDLE+DRAIN
    reason: str | None  # Reason= without its [user@time] suffix
    reason_time: str | None = None  # the time in Reason='s [user@time] suffix: when it was set

    @property
    def flags(self) -> tuple[str, ...]:
        return tuple(self.state.upper().rstrip("*~#!%$@^-").split("+"))

    @property
    def drained(self) -> bool:
        return any(flag.startswith("DRAIN") for flag in self.flags)

    @property
    def ours(self) -> bool:
        return self.drained and (self.reason or "").startswith(PREFIX)

    @property
    def not_ours(self) -> str | None:
        """Why this node is someone else's to act on (DOWN, FAIL, reboot pending), or None."""
        found = [f for f in self.flags if f.startswith(LEFT_ALONE)]
        return "+".join(found) if found else None


@dataclass(frozen=True)
class Cause:
    """What a drain reason says, field by field (the grammar in scripts/slurm/README.md)."""

    fault: str  # "XID 79 GPU has fallen off the bus": the code or item, then its meaning
    where: str  # "gpu 0 0000:3b:00.0 sn 1654922006536", or "host"
    action: str  # what to do: "reboot the node"
    since: float  # when it was first seen (seconds since the epoch)


def _clean(text: str) -> str:
    return " ".join(_UNSAFE.sub(" ", text).split())


def _fit(text: str, room: int) -> str:
    """``text`` in ``room`` characters, dropping whole words from its end ("..." says so).

    A first word longer than the room (a path, a hex dump) is cut itself: a field is never
    left empty.
    """
    if len(text) <= room:
        return text
    words = text[: max(0, room - 3) + 1].split(" ")
    kept = " ".join(words[:-1]) if len(words) > 1 else ""
    return f"{kept}..." if kept else f"{text[:max(0, room - 3)]}..."[:room]


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(seconds))


def reason(cause: Cause, more: int = 0) -> str:
    """``PREFIX FAULT; WHERE; ACTION; since TIME[; +N more]``, within ``MAX_REASON``.

    Only characters that mean nothing to a shell or to scontrol's ``key=value`` parsing.
    What does not fit is shortened between words, the fault's meaning first, then the action;
    the code (the fault's first two words), the GPU and the time are never shortened.
    """
    fault = _clean(cause.fault) or "unnamed fault"
    where = _clean(cause.where) or "host"
    action = _clean(cause.action) or "see workloads health"
    where = _fit(where, 60)
    tail = f"; since {stamp(cause.since)}" + (f"; +{more} more" if more else "")
    room = MAX_REASON - len(PREFIX) - 1 - len(where) - len(tail) - 4  # the two "; " separators
    code = _fit(" ".join(fault.split(" ")[:2]), 24)
    if len(fault) + len(action) > room:
        action = _fit(action, min(len(action), max(room // 3, room - len(fault))))
        fault = _fit(fault, room - len(action))
        if not fault.startswith(code):
            fault = code
        action = _fit(action, max(0, room - len(fault)))
    return f"{PREFIX} {fault}; {where}; {action}{tail}"


def head(text: str | None) -> str:
    """A reason without its ``; +N more``: what stays the same while the first fault is open."""
    return re.sub(r"; \+\d+ more$", "", text or "")


def node_name(given: str | None = None) -> str:
    """``--node``, else ``SLURMD_NODENAME`` (what slurmd sets), else ``hostname -s``."""
    name = given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
    if not NODE_NAME.fullmatch(name):
        raise WorkloadError(
            f"node name {name[:70]!r} is not a SLURM node name",
            "give --node NAME (letters, digits, '.', '_', '-')",
        )
    return name


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
    found = re.search(r"^\s*Reason=(.*?)(?:\s+\[[^\]@]*@([^\]]*)\])?\s*$", text, re.MULTILINE)
    return NodeState(
        state[1] if state else "UNKNOWN",
        found[1] if found else None,
        found[2] if found else None,
    )


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


def act(node: str, reasons: list[str], timeout: float = 10.0) -> str:
    """Drain or resume ``node`` as the run found; returns what was done, in words.

    ``reasons``: one per failure, the first the one to drain with. A node this check drained
    for a fault that is still failing keeps its reason and its time (Slurm stamps a reason
    when it is set, so setting it again would lose when the fault was first drained for). A
    node someone else drained, or that is DOWN, FAIL or waiting for a reboot, is left alone.
    """
    current = show(node, timeout)
    elsewhere = current.not_ours
    if elsewhere is not None:
        said = "fails" if reasons else "passes"
        return (f"{node} {said}, but it is {elsewhere} ({current.reason or 'no reason'}): left "
                "as it is")
    if reasons:
        if current.drained and not current.ours:
            return f"{node} already drained by someone else ({current.reason}): left as it is"
        if current.ours and head(current.reason) in {head(r) for r in reasons}:
            return f"{node} stays drained since {current.reason_time}: {current.reason}"
        drain(node, reasons[0], timeout)
        return f"{node} drained: {reasons[0]}"
    if current.ours:
        resume(node, timeout)
        return f"{node} resumed (was drained by this health check: {current.reason})"
    if current.drained:
        return f"{node} passes, but stays drained: someone else drained it ({current.reason})"
    return f"{node} passes ({current.state})"
