"""``workloads report SWEEP_DIR``: contact sheet, HTML explorer, CSV/JSON and throughput.

Writes into ``out_dir`` (default ``SWEEP_DIR/report``):
  contact_sheet.png   one row per varied parameter, its values as columns (image workloads)
  explorer.html       one slider per varied parameter; image, results and loss history
  database.csv/.json  the psweep database for pandas users (JSON as psweep-db2json writes it)
  summary.json/.md    runs ok/failed, runs per hour of each invocation, the scaling scan
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psweep as ps

from workloads import safefs
from workloads.bounded import BadInput, read_json
from workloads.records import atomic_write_bytes
from workloads.sweep.contact_sheet import has_images, render_contact_sheet
from workloads.sweep.explorer import render_explorer
from workloads.sweep.results import SweepView, load_sweep
from workloads.sweep.scaling import SCALING_JSON
from workloads.sweep.session import key_metrics
from workloads.sweep.throughput import by_invocation, overall
from workloads.sweep.workload import BUILTIN_METRICS


def render_sweep_report(sweep_dir: Path, out_dir: Path | None = None) -> list[Path]:
    """Write every report file of the sweep in ``sweep_dir``; return their paths."""
    view = load_sweep(Path(sweep_dir))
    out = Path(out_dir) if out_dir is not None else Path(sweep_dir) / "report"
    safefs.ensure_directory(out)
    throughput = overall(by_invocation(view.frame))
    scaling = _read_scaling(Path(sweep_dir))
    headline = _headline(view, throughput)
    metrics = key_metrics(
        [{**run.results} for run in view.runs], BUILTIN_METRICS.get(view.workload, ())
    )
    written = _write_tables(view, out)
    if has_images(view):
        written.append(render_contact_sheet(view, out / "contact_sheet.png", headline))
    written.append(render_explorer(view, out / "explorer.html", metrics, headline, scaling))
    written += _write_summary(view, out, throughput, scaling, headline)
    return written


def _headline(view: SweepView, throughput: dict[str, Any]) -> str:
    """'12 runs ok, 1 failed; 41.3 runs/hour (4 workers)': the report's first line."""
    failed = sum(1 for run in view.runs if run.failed)
    text = f"{len(view.runs) - failed} runs ok, {failed} failed"
    rate = throughput["runs_per_hour"]
    if rate is not None:
        workers = sorted({e["workers"] for e in throughput["invocations"]})
        text += f"; {rate:.1f} runs/hour ({'/'.join(map(str, workers))} workers)"
    return text


def _write_tables(view: SweepView, out: Path) -> list[Path]:
    csv_path, json_path = out / "database.csv", out / "database.json"
    atomic_write_bytes(csv_path, view.frame.to_csv(index=False).encode())
    atomic_write_bytes(json_path, ps.df_to_json(view.frame).encode())
    return [csv_path, json_path]


def _read_scaling(sweep_dir: Path) -> dict[str, Any] | None:
    path = sweep_dir / SCALING_JSON
    try:
        data = read_json(path)
    except (OSError, BadInput):
        return None
    return data if isinstance(data, dict) and data.get("steps") else None


def _write_summary(view: SweepView, out: Path, throughput: dict[str, Any],
                   scaling: dict[str, Any] | None, headline: str) -> list[Path]:
    failed = [run for run in view.runs if run.failed]
    summary = {
        "sweep": str(view.directory),
        "workload": view.workload,
        "mode": view.mode,
        "varied": {name: view.values[name] for name in view.varied},
        "center": view.center,
        "runs": len(view.runs),
        "ok": len(view.runs) - len(failed),
        "failed": [{"pset_id": r.pset_id, "failure": r.failure, "error": r.error} for r in failed],
        "rows_of_other_specs": view.others,
        "throughput": throughput,
        "scaling": scaling,
    }
    json_path, md_path = out / "summary.json", out / "summary.md"
    text = json.dumps(summary, indent=2, default=str) + "\n"
    atomic_write_bytes(json_path, text.encode())
    atomic_write_bytes(md_path, _markdown(view, throughput, scaling, headline).encode())
    return [json_path, md_path]


def _markdown(view: SweepView, throughput: dict[str, Any], scaling: dict[str, Any] | None,
              headline: str) -> str:
    lines = [
        f"# {view.workload} sweep ({view.mode}): {view.directory}",
        "",
        headline,
        "",
        "| invocation | workers | runs ok | failed | wall time s | runs/hour |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n, entry in enumerate(throughput["invocations"], 1):
        lines.append(
            f"| {n} | {entry['workers']} | {entry['runs']} | {entry['failed']} | "
            f"{entry['wall_seconds']:.1f} | {_rate(entry['runs_per_hour'])} |"
        )
    if scaling:
        base = scaling["speedup_over_workers"]
        lines += [
            "",
            f"Scaling scan ({scaling['runs_per_step']} runs per step, `{scaling.get('command')}`):",
            "",
            f"| workers | devices | runs/hour | speedup vs {base} | efficiency |",
            "|---:|---|---:|---:|---:|",
        ]
        for step in scaling["steps"]:
            speedup = f"{step['speedup']:.2f}" if step.get("speedup") is not None else "-"
            eff = f"{step['efficiency']:.0%}" if step.get("efficiency") is not None else "-"
            lines.append(f"| {step['workers']} | {', '.join(step['slots'])} | "
                         f"{_rate(step['runs_per_hour'])} | {speedup} | {eff} |")
    return "\n".join(lines) + "\n"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
