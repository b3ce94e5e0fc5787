"""Acceptance records on disk to `Host`s: one `<host>.json` per host in a run's directory.

`ansible/accept.yml` writes each host's `workloads accept` record as `<host>.json`; for a
host whose battery could not run (unreachable, image missing, a crash) it writes
`{"host": ..., "status": "error", "error": "<reason>"}` instead, so that host is a `fail`
with its reason and never just missing from the report.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError
from workloads.fleet.model import Figure, Host

MAX_RECORD_BYTES = 16 * 1024 * 1024


def hardware_group(record: dict[str, Any]) -> str:
    """The hardware a host is compared within: the battery's key, else GPU or CPU model × count."""
    hardware = record.get("hardware") or {}
    if isinstance(hardware, dict) and hardware.get("group"):
        return str(hardware["group"])
    env = record.get("env") or {}
    gpus = env.get("gpus") or []
    if gpus:
        names = sorted({str(g.get("name", "GPU")) for g in gpus if isinstance(g, dict)})
        return f"{len(gpus)}× {' + '.join(names)}"
    cpu = env.get("cpu") or env.get("cpu_model") or "CPU"
    count = env.get("cpu_count") or env.get("logical_cpus")
    return f"{cpu} ×{count}" if count else str(cpu)


def _figures(host: str, record: dict[str, Any]) -> list[Figure]:
    figures = []
    for row in record.get("checks") or []:
        value = row.get("value")
        if not isinstance(value, int | float) or isinstance(value, bool):
            continue
        device = row.get("device")
        figures.append(Figure(
            host=host, check=str(row.get("check", "?")),
            device=None if device in (None, "", "host") else str(device),
            value=float(value), unit=str(row.get("unit", "")),
            verdict=str(row.get("verdict", "pass")), reason=str(row.get("reason", "")),
            limit=_number(row.get("limit")), warn_at=_number(row.get("warn_at")),
            fail_at=_number(row.get("fail_at")),
            higher_is_better=bool(row.get("higher_is_better", True))))
    return figures


def _findings(record: dict[str, Any]) -> list[tuple[str, str]]:
    """Verdicts of checks without a figure (throttling, ECC, DCGM): they count, unplotted."""
    out = []
    for row in record.get("checks") or []:
        value = row.get("value")
        verdict = str(row.get("verdict", "pass"))
        if verdict in ("warn", "fail") and not isinstance(value, int | float):
            where = f"{row['device']} " if row.get("device") not in (None, "", "host") else ""
            out.append((verdict, f"{where}{row.get('check', '?')}: {row.get('reason', '')}"))
    return out


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def host_from_record(name: str, record: dict[str, Any]) -> Host:
    """One host from its record (or from the play's error stub)."""
    if record.get("status") == "error" or "checks" not in record:
        reason = record.get("error") or "its record holds no checks"
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
        if path.stat().st_size > MAX_RECORD_BYTES:
            raise WorkloadError(f"{path} is larger than {MAX_RECORD_BYTES // 2**20} MiB",
                                "it is not an acceptance record; remove it from the directory")
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise WorkloadError(f"{path} is not a JSON record ({exc.__class__.__name__})",
                                "remove it, or run accept.yml again for that host") from exc
        if not isinstance(record, dict):
            raise WorkloadError(f"{path} is not a JSON object",
                                "remove it, or run accept.yml again for that host")
        hosts.append(host_from_record(str(record.get("host") or path.stem), record))
    if not hosts:
        raise WorkloadError(f"{directory} holds no <host>.json records",
                            "run ansible-playbook accept.yml first, or give its run directory")
    return hosts
