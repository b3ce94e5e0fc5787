"""Records → figures and a Markdown table: what ``workloads report`` draws for runs.

Input is any mix of record files (``*.json``), JSON-lines logs
(``records.jsonl``), scaling summaries (``scaling.json``), GPU monitor CSVs
(``*.gpu.csv``) and directories holding them. Output, in one directory:

- ``epoch_time.png``, ``images_per_sec.png``, ``speedup.png``: the scaling
  figures, from a study's summary or from CIFAR-10 records of one configuration
  at several replica counts;
- ``<run>.utilisation.png`` for each monitor CSV;
- ``throughput.png``: CPU vs GPU images/s per configuration;
- ``report.md``: a table of every record, the scaling table, links to the figures.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfhost import plots
from tfhost.monitor import read_samples
from tfhost.scaling import ScalePoint, read_summary, summarise
from workloads import printable, safefs
from workloads.bounded import (
    REPORT_VALUES_MAX,
    Allowance,
    BadInput,
    NotAFile,
    OverAllowance,
    read_json,
)
from workloads.errors import WorkloadError
from workloads.records import LOG_NAME, atomic_write_bytes, read_log

MONITOR_SUFFIX = ".gpu.csv"


@dataclass
class Inputs:
    """What was found among the paths given to the report."""

    records: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (source, record)
    summaries: list[Path] = field(default_factory=list)
    monitor_csvs: list[Path] = field(default_factory=list)
    # What all the JSON read for one report may make together (workloads.bounded.Allowance).
    allowance: Allowance = field(default_factory=lambda: Allowance(REPORT_VALUES_MAX))


def collect(paths: Iterable[Path]) -> Inputs:
    """Sort the given files (and the files in given directories) by kind."""
    found = Inputs()
    for path in map(Path, paths):
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.name != LOG_NAME:  # the .json files say the same
                    _add_file(found, child, strict=False)
        elif path.exists() or path.is_symlink():  # a FIFO or a link: the reader refuses it
            _add_file(found, path, strict=True)
        else:
            raise WorkloadError(f"{path} does not exist",
                                "give record files or results directories")
    if not (found.records or found.summaries or found.monitor_csvs):
        names = ", ".join(str(p) for p in paths)
        raise WorkloadError(
            f"no records, scaling summaries or GPU monitor CSVs in {names}",
            "point to a results directory or to record .json / records.jsonl files",
        )
    return found


def _add_file(found: Inputs, path: Path, strict: bool) -> None:
    if path.name.endswith(MONITOR_SUFFIX):
        found.monitor_csvs.append(path)
    elif path.suffix == ".jsonl":
        log = read_log(path, found.allowance)
        found.records += [(f"{path}:{i + 1}", r) for i, r in enumerate(log)
                          if isinstance(r, dict) and "workload" in r]
    elif path.suffix == ".json":
        try:
            data = read_json(path, allowance=found.allowance)  # size, values, nesting first
        except OverAllowance as exc:
            raise WorkloadError(f"{path} {exc}", "report fewer files at once") from exc
        except BadInput as exc:
            if strict:
                fix = "give the file itself" if isinstance(exc, NotAFile) else "regenerate it"
                raise WorkloadError(f"{path} {exc}", fix) from exc
            return
        except OSError as exc:
            raise WorkloadError(f"cannot read {path} ({exc.strerror or exc})",
                                "check the file") from None
        if isinstance(data, dict) and data.get("study") == "scaling":
            found.summaries.append(path)
        elif isinstance(data, dict) and "workload" in data:
            found.records.append((str(path), data))
        elif strict:
            raise WorkloadError(f"{path} is not a workloads record", "point to a run's .json file")
    elif strict:
        raise WorkloadError(
            f"{path} is neither a record (.json, .jsonl) nor a GPU monitor CSV (*{MONITOR_SUFFIX})",
            "give record files or results directories",
        )


def render_records(inputs: Sequence[Path], out_dir: Path) -> list[Path]:
    """Draw every figure the inputs allow and write ``report.md``; returns the files written."""
    found = collect(inputs)
    out_dir = Path(out_dir)
    safefs.ensure_directory(out_dir)
    written: list[Path] = []
    scaling_tables: list[tuple[str, str, list[ScalePoint]]] = []

    for name, unit, points in _scaling_sets(found):
        target = out_dir if name == "" else out_dir / name
        written += plots.scaling_figures(points, unit, target, title=name)
        scaling_tables.append((name, unit, points))

    for csv_path in found.monitor_csvs:
        try:
            samples = read_samples(csv_path)
        except FileNotFoundError:
            raise WorkloadError(f"{csv_path} does not exist", "check the path") from None
        except OSError as exc:
            raise WorkloadError(f"cannot read {csv_path} ({exc.strerror or exc})",
                                "check the file") from None
        except NotAFile as exc:
            raise WorkloadError(f"{csv_path} {exc}", "give the file itself") from None
        except BadInput as exc:
            raise WorkloadError(f"{csv_path} {exc}",
                                "regenerate it (or leave it out of the report)") from None
        if samples:
            stem = csv_path.name.removesuffix(MONITOR_SUFFIX)
            written.append(plots.utilisation_figure(samples, out_dir / f"{stem}.utilisation.png",
                                                    title=stem))

    bars = throughput_rows(found.records)
    if bars:
        written.append(plots.throughput_bars(bars, out_dir / "throughput.png"))

    markdown = markdown_report(found.records, scaling_tables, written, out_dir)
    report = out_dir / "report.md"
    atomic_write_bytes(report, markdown.encode())
    written.append(report)
    return written


def device_kind(record: dict[str, Any]) -> str:
    """"GPU" when the record's devices are GPUs, else "CPU"."""
    env = record.get("env") or {}
    devices = [str(d) for d in record.get("devices") or []]
    gpu_names = set(env.get("gpus") or [])
    if devices and (set(devices) & gpu_names or any("gpu" in d.lower() for d in devices)):
        return "GPU"
    return "CPU"


def _config_key(record: dict[str, Any]) -> tuple[Any, ...]:
    return (record.get("model"), device_kind(record), record.get("batch_size_per_replica"),
            record.get("precision"), bool(record.get("xla")), record.get("data"),
            record.get("backend"))


def _scaling_sets(found: Inputs) -> list[tuple[str, str, list[ScalePoint]]]:
    """(name, unit, points) from summaries, else from records at several replica counts."""
    sets = []
    for path in found.summaries:
        unit, points = read_summary(path)
        sets.append((path.parent.name if len(found.summaries) > 1 else "", unit, points))
    if sets:
        return sets
    groups: dict[tuple[Any, ...], dict[int, tuple[int, dict[str, Any], str]]] = defaultdict(dict)
    for source, record in found.records:
        if record.get("workload") == "cifar10" and record.get("examples_per_sec"):
            replicas = int(record.get("replicas") or 1)
            groups[_config_key(record)][replicas] = (replicas, record, Path(source).name)
    scaling = {key: runs for key, runs in groups.items() if len(runs) >= 2}
    for key, runs in scaling.items():
        model, kind, batch, precision, xla, _, _ = key
        name = "" if len(scaling) == 1 else f"{model}-{kind.lower()}-b{batch}-{precision}"
        unit = "GPUs" if kind == "GPU" else "CPU replicas"
        sets.append((name + ("-xla" if xla and name else ""), unit, summarise(list(runs.values()))))
    return sets


def throughput_rows(records: Sequence[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One bar per CIFAR-10 configuration (the best run of each), CPU bars first."""
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    for _, record in records:
        rate = record.get("examples_per_sec")
        if record.get("workload") != "cifar10" or not rate:
            continue
        key = (*_config_key(record), record.get("replicas"))
        if key not in best or rate > best[key]["images_per_sec"]:
            kind = device_kind(record)
            replicas = int(record.get("replicas") or 1)
            what = f"{replicas} GPU{'s' if replicas > 1 else ''}" if kind == "GPU" else (
                f"CPU ×{replicas}" if replicas > 1 else "CPU")
            best[key] = {
                "label": f"{record.get('model')}\n{what}\n{record.get('precision', '')}",
                "kind": kind,
                "images_per_sec": float(rate),
                "mfu": record.get("mfu"),
            }
    return sorted(best.values(), key=lambda r: (r["kind"] != "CPU", r["label"]))


RECORD_COLUMNS: list[tuple[str, str]] = [
    ("workload", "workload"),
    ("model", "model"),
    ("devices", "devices"),
    ("replicas", "replicas"),
    ("global_batch_size", "global batch"),
    ("precision", "precision"),
    ("xla", "XLA"),
    ("examples_per_sec", "images/s"),
    ("mfu", "MFU"),
    ("step_time_s", "s/step"),
    ("epoch_times_s", "epoch times (s)"),
    ("accuracy", "test acc."),
    ("status", "status"),
]


def markdown_report(records: Sequence[tuple[str, dict[str, Any]]],
                    scaling: Sequence[tuple[str, str, Sequence[ScalePoint]]],
                    figures: Sequence[Path], out_dir: Path) -> str:
    """The Markdown text of ``report.md``."""
    lines = ["# Benchmark report", ""]
    if records:
        lines += ["## Runs", "", "| record | " + " | ".join(h for _, h in RECORD_COLUMNS) + " |",
                  "|---" * (len(RECORD_COLUMNS) + 1) + "|"]
        for source, record in records:
            cells = [_record_cell(key, record) for key, _ in RECORD_COLUMNS]
            lines.append(f"| {_cell(Path(source).name)} | " + " | ".join(cells) + " |")
        lines.append("")
    for name, unit, points in scaling:
        lines += [f"## Scaling{': ' + name if name else ''}", "",
                  f"| {unit} | epoch time (s) | images/s | speedup | efficiency |",
                  "|---:|---:|---:|---:|---:|"]
        for p in points:
            lines.append(f"| {p.count} | {p.epoch_time_s:.3f} | {p.images_per_sec:,.1f} | "
                         f"{p.speedup:.2f} | {p.efficiency:.0%} |")
        lines += ["", "Speedup is images/s divided by images/s at the smallest count; "
                  "efficiency is speedup divided by the ratio of counts.", ""]
    pictures = [f for f in figures if f.suffix == ".png"]
    if pictures:
        lines += ["## Figures", ""]
        for figure in pictures:
            rel = figure.relative_to(out_dir)
            lines.append(f"![{rel.stem}]({rel.as_posix()})")
        lines.append("")
    return "\n".join(lines)


def _record_cell(key: str, record: dict[str, Any]) -> str:
    """One table cell: devices condensed, MFU as a percentage of the measured peak."""
    if key == "devices":
        return _cell(_devices(record))
    value = record.get(key)
    if key == "mfu" and isinstance(value, (int, float)):
        return f"{value:.0%}"
    return _cell(value)


def _devices(record: dict[str, Any]) -> str:
    devices = [str(d) for d in record.get("devices") or []]
    if not devices:
        return "-"
    if len(set(devices)) == 1:
        return f"{len(devices)} × {devices[0]}"
    return ", ".join(devices)


def _cell(value: Any) -> str:
    if value is None or value == []:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1 else f"{value:,.1f}"
    if isinstance(value, list):
        return ", ".join(_cell(v) for v in value)
    # a record's text: shown printable (ESC, BEL, C1, bidi as escapes) and capped, then |
    return printable.line(str(value)).replace("|", "\\|")
