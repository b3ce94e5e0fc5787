"""Acceptance records on disk to `Host`s: one `<host>.json` per host in a run's directory.

`ansible/accept.yml` writes each host's `workloads accept` record as `<host>.json`; for a
host whose battery could not run (unreachable, image missing, a crash) it writes
`{"host": ..., "status": "error", "error": "<reason>"}` instead, so that host is a `fail`
with its reason and never just missing from the report.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from workloads.bounded import BadInput, read_json
from workloads.errors import WorkloadError, clip
from workloads.fleet.model import Figure, Host

MAX_RECORD_BYTES = 16 * 1024 * 1024


def hardware_group(record: dict[str, Any]) -> str:
    """The hardware a host is compared within: GPU model × count (and its fabric), else the CPU.

    The fabric is the all-reduce's limit as the battery named it (NVLink or PCIe): eight
    H100s on NVSwitch and eight on PCIe are different machines for every host-wide check.
    """
    env = record.get("env") or {}
    gpus = [str(g.get("name", "GPU")) if isinstance(g, dict) else str(g)
            for g in env.get("gpus") or []]
    if gpus:
        names = " + ".join(sorted(set(gpus)))
        fabric = next((str(f.get("limit_source")) for f in _rows(record)
                       if f.get("check") == "allreduce" and f.get("limit_source")), None)
        return f"{len(gpus)}× {names}" + (f", {fabric}" if fabric else "")
    cpu = env.get("cpu") or "CPU"
    count = env.get("cpu_count")
    return f"{cpu} ×{count}" if count else str(cpu)


def _rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    rows = record.get("findings")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _device(row: dict[str, Any]) -> str | None:
    """A single GPU ("GPU 3") is compared with every GPU of the group; anything else per host."""
    device = str(row.get("device") or "")
    return device if re.fullmatch(r"GPU \d+", device) else None


def _series(row: dict[str, Any]) -> str:
    item = str(row.get("item") or "")
    return f"{row.get('check', '?')} {item}".strip()


# The battery's checks whose figures are performance, higher being better: these are
# compared across hosts. Its other rows with a figure (the host's other load, NVML's power
# and temperature) are conditions: their own verdicts count, their figures are not ranked.
PERFORMANCE_CHECKS = frozenset({"matmul", "membw", "transfer", "allreduce", "training"})


def _figures(host: str, record: dict[str, Any]) -> list[Figure]:
    figures = []
    for row in _rows(record):
        value = _number(row.get("value"))
        if value is None or row.get("check") not in PERFORMANCE_CHECKS:
            continue
        raw = row.get("details")
        details: dict[str, Any] = raw if isinstance(raw, dict) else {}
        figures.append(Figure(
            host=host, check=_series(row), device=_device(row), value=value,
            unit=str(row.get("unit", "")), verdict=str(row.get("verdict", "pass")),
            reason=str(row.get("reason", "")), limit=_number(row.get("limit")),
            warn_at=_number(details.get("warn_at")), fail_at=_number(details.get("fail_at")),
            higher_is_better=bool(details.get("higher_is_better", True))))
    return figures


def _findings(record: dict[str, Any]) -> list[tuple[str, str]]:
    """Verdicts of rows that are not ranked (throttling, ECC, DCGM, other load): they count."""
    out = []
    for row in _rows(record):
        verdict = str(row.get("verdict", "pass"))
        ranked = row.get("check") in PERFORMANCE_CHECKS and _number(row.get("value")) is not None
        if verdict in ("warn", "fail") and not ranked:
            device = str(row.get("device") or "")
            where = f"{device} " if device and device != "host" else ""
            out.append((verdict, f"{where}{_series(row)}: {row.get('reason', '')}"))
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def host_from_record(name: str, record: dict[str, Any]) -> Host:
    """One host from its record (or from the play's error stub)."""
    if record.get("status") == "error" or not isinstance(record.get("findings"), list):
        reason = record.get("error") or "its record holds no findings"
        return Host(name=name, group=hardware_group(record), error=str(reason))
    return Host(name=name, group=hardware_group(record), figures=_figures(name, record),
                findings=_findings(record))


def load_fleet(directory: Path) -> list[Host]:
    """Every `<host>.json` in `directory`; a file that is not a record is a one-line error."""
    if not directory.is_dir():
        raise WorkloadError(f"{directory} is not a directory",
                            "give the run directory accept.yml wrote (results/acceptance/<run>)")
    hosts = []
    for path in sorted(directory.glob("*.json")):
        try:
            record = read_json(path, MAX_RECORD_BYTES)  # size, nesting, numbers: bounded
        except (OSError, BadInput) as exc:
            raise WorkloadError(f"{path} is not a JSON record ({clip(str(exc), 60)})",
                                "remove it, or run accept.yml again for that host") from exc
        if not isinstance(record, dict):
            raise WorkloadError(f"{path} is not a JSON object",
                                "remove it, or run accept.yml again for that host")
        hosts.append(host_from_record(str(record.get("host") or path.stem), record))
    if not hosts:
        raise WorkloadError(f"{directory} holds no <host>.json records",
                            "run ansible-playbook accept.yml first, or give its run directory")
    return hosts
