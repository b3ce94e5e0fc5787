"""Acceptance records on disk to `Host`s: one `<host>.json` per host in a run's directory.

`ansible/accept.yml` writes each host's `workloads accept` record as `<host>.json`; for a
host whose battery could not run (unreachable, image missing, a crash) it writes
`{"host": ..., "status": "error", "error": "<reason>"}` instead, so that host is a `fail`
with its reason and never just missing from the report. A file that cannot be read as a
record (cut short by a full disk, not JSON, too large) fails that one host, named by its
file, and every other host is still judged: one bad file must not hide a fleet's verdicts.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from workloads.accept import links as nvlink_rule
from workloads.bounded import BadInput, loads_json, read_capped
from workloads.errors import WorkloadError, clip
from workloads.fleet.identity import gpu_identity, model_reasons
from workloads.fleet.model import Figure, Host, Link, Reason

MAX_RECORD_BYTES = 16 * 1024 * 1024
GPU_LABEL = re.compile(r"GPU \d+")


UNKNOWN_HARDWARE = "unknown hardware"


def hardware_group(record: dict[str, Any]) -> str:
    """The hardware a host is compared within: what no fault can change.

    The model most of its GPUs are (NVML's names, as `env.gpus` lists them), else the CPU
    model. Not the GPU count, the NVLinks or the fabric the all-reduce was judged against: a
    GPU fallen off the bus or a link down changes those, and a key holding them would move
    the faulty host into a group of its own, away from the siblings that show what it lacks.
    Nor every model the host has: one GPU of another model (a wrong spare after an RMA)
    would make the host a group of one that passes by having nothing to be compared with;
    it stays with its siblings and that GPU is named (`identity.model_reasons`).
    """
    env = record.get("env")
    if not isinstance(env, dict):
        return UNKNOWN_HARDWARE
    gpus = _gpu_names(env)
    if gpus:
        tally = Counter(gpus)
        return min(tally, key=lambda name: (-tally[name], name))  # a tie: the first by name
    return str(env.get("cpu") or "CPU")


def _gpu_names(env: dict[str, Any]) -> list[str]:
    raw = env.get("gpus")
    return [str(g.get("name", "GPU")) if isinstance(g, dict) else str(g)
            for g in raw] if isinstance(raw, list) else []


def _rows(record: dict[str, Any]) -> list[dict[str, Any]]:
    rows = record.get("findings")
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _device(row: dict[str, Any]) -> str | None:
    """A single GPU ("GPU 3") is compared with every GPU of the group; anything else per host."""
    device = str(row.get("device") or "")
    return device if GPU_LABEL.fullmatch(device) else None



def row_key(row: dict[str, Any]) -> str:
    """A row's name without its device: "matmul bfloat16 8192²", "nvml NVLink".

    A trailing parenthesis is what this host's run found, not which row it is: the
    all-reduce's "best busbw (1 GiB)" on one host is "best busbw (256 MiB)" on its sibling.
    """
    item = _DETAIL.sub("", str(row.get("item") or ""))
    return f"{row.get('check', '?')} {item}".strip()


_DETAIL = re.compile(r"\s*\([^()]*\)$")


# The battery's checks whose figures are performance, higher being better: these are
# compared across hosts. Its other rows with a figure (the host's other load, NVML's power
# and temperature) are conditions: their own verdicts count, their figures are not ranked.
PERFORMANCE_CHECKS = frozenset({"matmul", "membw", "transfer", "allreduce", "p2p", "training"})
P2P_SUMMARY = "pair matrix"  # the p2p row with the slowest pair: its one ranked figure


def _ranked(row: dict[str, Any]) -> bool:
    """A performance row with a figure: compared across hosts.

    Of the pair matrix only its summary (the slowest pair) is ranked; a row per bad pair
    ("GPU 2 → GPU 5") says which, and is the summary's evidence, not a figure of its own.
    """
    check = row.get("check")
    if not isinstance(check, str) or check not in PERFORMANCE_CHECKS \
            or _number(row.get("value")) is None:
        return False
    return row.get("check") != "p2p" or row.get("item") == P2P_SUMMARY


def _is_pair_row(row: dict[str, Any]) -> bool:
    return row.get("check") == "p2p" and row.get("item") != P2P_SUMMARY


def ranked_key(key: str) -> bool:
    """Whether a row key (``row_key``: "check item") names a ranked performance row."""
    check = key.split(" ", 1)[0]
    return check in PERFORMANCE_CHECKS and (check != "p2p" or key == f"p2p {P2P_SUMMARY}")


def _is_link_row(row: dict[str, Any]) -> bool:
    return row.get("check") == "nvml" and row.get("item") == "NVLink"


def _figures(host: str, record: dict[str, Any]) -> tuple[list[Figure], list[Reason]]:
    """The ranked figures, and a `fail` for each that is not a number a machine can measure."""
    figures = []
    broken: list[str] = []
    for row in _rows(record):
        if not _ranked(row):
            continue
        value = _number(row.get("value"))
        assert value is not None
        device = _device(row)
        if not math.isfinite(value) or value < 0:
            where = f"{device} " if device else ""
            what = "not a number" if math.isnan(value) else (
                "infinite" if math.isinf(value) else "negative")
            broken.append(f"{where}{row_key(row)}: the figure is {what}")
            continue
        raw = row.get("details")
        details: dict[str, Any] = raw if isinstance(raw, dict) else {}
        figures.append(Figure(
            host=host, check=row_key(row), device=device, value=value,
            unit=str(row.get("unit", "")), verdict=str(row.get("verdict", "pass")),
            reason=str(row.get("reason", "")), limit=_number(row.get("limit")),
            warn_at=_number(details.get("warn_at")), fail_at=_number(details.get("fail_at")),
            higher_is_better=bool(details.get("higher_is_better", True)),
            scope="" if device else str(row.get("device") or "")))
    problems = []
    if broken:
        problems.append(Reason("fail", (f"{broken[0]}: the measurement failed" if len(broken) == 1
                                        else f"{len(broken)} figures are not measurements "
                                        f"(NaN, infinite or negative): {broken[0]}, ..."),
                               tuple(broken)))
    return figures, problems


def _links(record: dict[str, Any]) -> list[Link]:
    """Each GPU's NVLink row with a count: value = links active, limit = the board's links.

    The links count where the battery judged them and its rule (``accept.links.decide``),
    run again on what the row carries, still does: a record from an older battery (one
    GPU of a board in a VM, failed for links with no peer to train) is read as the battery
    now would write it; a row the battery did not judge (``info``) stays unjudged.
    """
    env = record.get("env")
    visible = len(_gpu_names(env)) if isinstance(env, dict) else 0
    visible = visible or sum(1 for d in record.get("devices") or [] if isinstance(d, dict))
    links = []
    for row in _rows(record):
        active, board = _number(row.get("value")), _number(row.get("limit"))
        if not _is_link_row(row) or active is None or not math.isfinite(active):
            continue
        summary = nvlink_rule.summary_from_row(row, visible)
        judged = (row.get("verdict") in ("pass", "warn", "fail") and summary is not None
                  and nvlink_rule.decide(summary, None)[0] != "info")
        links.append(Link(device=str(row.get("device") or "?"), active=int(active),
                          board=int(board) if board is not None and math.isfinite(board) else None,
                          judged=judged))
    return links


def _findings(record: dict[str, Any], links: list[Link]) -> list[tuple[str, str]]:
    """Verdicts of rows that are not ranked (throttling, ECC, DCGM, other load): they count.

    An NVLink row whose links are short is left to the fleet's link rule, which names it in
    one line ("NVLink: 17 of 18 links up on GPU 3") rather than twice.
    """
    short = {link.device for link in links if link.board is not None and link.active < link.board}
    out = []
    for row in _rows(record):
        verdict = str(row.get("verdict", "pass"))
        ranked = _ranked(row)
        if _is_link_row(row) and str(row.get("device") or "?") in short:
            continue
        if _is_pair_row(row):  # named in the pair matrix's own reason, drawn in the report
            continue
        if verdict in ("warn", "fail") and not ranked:
            device = str(row.get("device") or "")
            where = f"{device} " if device and device != "host" else ""
            out.append((verdict, f"{where}{row_key(row)}: {row.get('reason', '')}"))
    return out


def listed(value: Any) -> list[Any]:
    """`value` if a list, else none: a record edited by hand may hold anything anywhere."""
    return value if isinstance(value, list) else []


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _row_inventory(record: dict[str, Any]) -> tuple[dict[str, set[str]], dict[str, str], set[str],
                                                   set[str]]:
    """Which rows the record holds on which devices, a note for each, which have figures, and
    which only report a problem (every row of that name `warn` or `fail`)."""
    rows: dict[str, set[str]] = {}
    notes: dict[str, str] = {}
    with_figure: set[str] = set()
    healthy: set[str] = set()
    for row in _rows(record):
        key = row_key(row)
        rows.setdefault(key, set()).add(str(row.get("device") or ""))
        notes.setdefault(key, f"{row.get('verdict', '?')}: {row.get('reason', '')}".strip())
        if _number(row.get("value")) is not None:  # NaN too: its own reason names it
            with_figure.add(key)
        if row.get("verdict") not in ("warn", "fail"):
            healthy.add(key)
    return rows, notes, with_figure, set(rows) - healthy


def _record_problems(record: dict[str, Any]) -> list[Reason]:
    """What makes a record partial: not finished, no rows, no hardware."""
    problems = []
    status = record.get("status")
    if status != "done":
        problems.append(Reason("fail", f"the record is partial: status {str(status)[:40]!r}, "
                                       "not 'done' (the battery did not finish)"))
    rows = _rows(record)
    if not rows:
        problems.append(Reason("fail", "the record holds no findings: nothing was measured"))
        return problems
    if not isinstance(record.get("env"), dict):
        problems.append(Reason("fail", "the record has no env: its hardware is unknown"))
    return problems


def _expected_gpus(record: dict[str, Any]) -> tuple[int | None, list[Reason]]:
    """The inventory's GPU count for the host (`acceptance_expected_gpus`), where declared."""
    inventory = record.get("inventory")
    if not isinstance(inventory, dict) or inventory.get("expected_gpus") is None:
        return None, []
    value = inventory["expected_gpus"]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value, []
    return None, [Reason("fail", f"the inventory's expected GPU count {str(value)[:20]!r} is not "
                                 "a count: set acceptance_expected_gpus to a whole number")]


def host_from_record(name: str, record: dict[str, Any]) -> Host:
    """One host from its record (or from the play's error stub)."""
    if record.get("status") == "error" or not isinstance(record.get("findings"), list):
        reason = record.get("error") or "its record holds no findings"
        return Host(name=name, group=hardware_group(record),
                    error=f"the battery did not run: {clip(str(reason), 400)}")
    env = record.get("env")
    gpus = len(_gpu_names(env)) if isinstance(env, dict) else 0
    figures, broken = _figures(name, record)
    links = _links(record)
    expected, bad_expectation = _expected_gpus(record)
    rows, notes, with_figure, problem_rows = _row_inventory(record)
    labels = [str(d.get("label")) for d in listed(record.get("devices"))
              if isinstance(d, dict) and GPU_LABEL.fullmatch(str(d.get("label")))]
    selected = record.get("checks_selected")
    partial = _record_problems(record)
    names, uuids = gpu_identity(record, gpus)
    devices = labels if len(labels) == gpus else [f"GPU {i}" for i in range(gpus)]
    return Host(name=name, group=hardware_group(record), figures=figures,
                findings=_findings(record, links), gpus=gpus, expected_gpus=expected,
                gpu_devices=devices, gpu_uuids=uuids, gpu_models=names,
                links=links, rows=rows, row_notes=notes, figure_keys=with_figure,
                problem_rows=problem_rows,
                selected=[str(c) for c in selected] if isinstance(selected, list) else [],
                partial=bool(partial),
                problems=[*partial, *model_reasons(devices, names), *broken, *bad_expectation],
                started_at=str(record["started_at"])[:40] if record.get("started_at") else None,
                p2p=_pair_matrix(record))


def _pair_matrix(record: dict[str, Any]) -> dict[str, Any] | None:
    """The pair matrix's details (labels, GB/s, verdicts), for the report to draw."""
    for row in _rows(record):
        details = row.get("details")
        if row.get("check") == "p2p" and row.get("item") == P2P_SUMMARY and isinstance(
            details, dict
        ) and isinstance(details.get("labels"), list) and isinstance(details.get("gbps"), list):
            return {**details, "row_verdict": str(row.get("verdict", ""))}
    return None


def host_from_bytes(name: str, data: bytes) -> Host:
    """One host from its record's bytes; bytes that are no record make that host a `fail`."""
    try:
        record = loads_json(data)  # nesting and numbers bounded
    except BadInput as exc:
        return unreadable(name, clip(str(exc), 80))
    if not isinstance(record, dict):
        return unreadable(name, f"a JSON {type(record).__name__}, not an object")
    given = record.get("host")  # a name only where it is text: not "[]", "5" or "{...}"
    return host_from_record(given if isinstance(given, str) and given else name, record)


def unreadable(name: str, why: str) -> Host:
    """The `fail` of a host whose record cannot be read, with what to do about it."""
    return Host(name=name, group=UNKNOWN_HARDWARE, unreadable=True,
                error=f"its record {name}.json cannot be read: it {why}; run accept.yml again "
                      f"for it (--limit {name},localhost -e acceptance_run=<run>)")


def absent_hosts(hosts: Iterable[Host], expected: Iterable[str], directory: Path) -> list[Host]:
    """A `fail` for every host the inventory expects that has no record in the run."""
    have = {host.name for host in hosts}
    return [Host(name=name, group=UNKNOWN_HARDWARE,
                 error=f"no record: the inventory lists it and {directory.name}/ has no "
                       f"{name}.json (unreachable before the play recorded it, or left out "
                       f"with --limit); run accept.yml for it")
            for name in dict.fromkeys(expected) if name not in have]


def load_fleet(directory: Path, expected: Iterable[str] = ()) -> list[Host]:
    """Every `<host>.json` in `directory`, and a `fail` for each `expected` host without one.

    A file that cannot be read as a record is its host's `fail`, not the report's end.
    """
    if not directory.is_dir():
        raise WorkloadError(f"{directory} is not a directory",
                            "give the run directory accept.yml wrote (results/acceptance/<run>)")
    hosts = []
    for path in sorted(directory.glob("*.json")):
        if not path.is_file() and path.exists():  # a FIFO would block the read: never opened
            hosts.append(unreadable(path.stem, "is not a regular file"))
            continue
        try:
            data = read_capped(path, MAX_RECORD_BYTES)
        except BadInput as exc:
            hosts.append(unreadable(path.stem, clip(str(exc), 80)))
            continue
        except OSError as exc:
            hosts.append(unreadable(path.stem, f"cannot be opened ({exc.strerror or exc})"))
            continue
        hosts.append(host_from_bytes(path.stem, data))
    if not hosts:
        raise WorkloadError(f"{directory} holds no <host>.json records",
                            "run ansible-playbook accept.yml first, or give its run directory")
    if all(host.unreadable for host in hosts):  # no fleet to judge: the directory is wrong
        raise WorkloadError(f"{directory} holds no record that can be read "
                            f"({clip(str(hosts[0].error), 90)})",
                            "give the run directory accept.yml wrote, or run it again")
    return hosts + absent_hosts(hosts, expected, directory)
