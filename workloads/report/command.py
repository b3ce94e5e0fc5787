"""``workloads report``: turn results into figures, tables and browsable pages.

The argument decides the report:
  a sweep directory (holds psweep's database.pk)
      contact sheet PNG (one row per varied parameter), a single-file HTML
      explorer with one slider per parameter, CSV/JSON of the database, and
      the sweep's throughput (runs per hour);
  record files, records.jsonl logs, or directories of them (e.g. results/,
  or a scaling study's output)
      plots (epoch time, images/s and speedup vs GPU count; GPU utilisation
      over time; CPU vs GPU bars) and a Markdown table;
  --fleet DIR, a run directory of `ansible-playbook accept.yml` (one <host>.json each)
      the fleet verdict: hosts grouped by the model of most of their GPUs (a GPU of
      another model, a UUID seen twice, a record that cannot be read: each its host's
      fail), what a host lacks (GPUs, NVLinks, rows) named, each check compared with the
      datasheet (the battery's verdicts) and with the other hosts' median (robust
      outliers; in a group of two, 30 % or more worse than the other host fails); with
      --inventory FILE (default DIR/inventory.txt) every listed host without a record
      fails; with --baselines BDIR also with
      each host's own accepted record, and the records of hosts that pass become the
      baselines of hosts without one; fleet.html (one file, works offline), fleet.md,
      fleet.csv, fleet.json;
  --history DIR, the directory that holds the runs (results/acceptance)
      each host's figures over time, run by run, beside its baseline
      (DIR/baselines/<host>.json) with the last run's change against it; printed, and
      written as history.html.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from workloads.errors import WorkloadError

SWEEP_DATABASE = "database.pk"


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "report",
        help="plots, tables, contact sheet and HTML explorer from records or a sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "inputs",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="a sweep directory, or record files / logs / directories",
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        metavar="DIR",
        help="where to write the report (default: PATH/report for a sweep, ./report otherwise)",
    )
    parser.add_argument(
        "--fleet",
        type=Path,
        metavar="DIR",
        help="judge a fleet: the run directory accept.yml wrote (results/acceptance/<run>)",
    )
    parser.add_argument(
        "--baselines",
        type=Path,
        metavar="BDIR",
        help="with --fleet: compare each host with its accepted record in BDIR/<host>.json "
        "and make the records of passing hosts without one their baselines "
        "(accept.yml: results/acceptance/baselines)",
    )
    parser.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="with --fleet: the hosts the run was meant to cover, one inventory host name a "
        "line; each without a record in DIR fails (default: DIR/inventory.txt, which "
        "accept.yml writes)",
    )
    parser.add_argument(
        "--renew-baselines",
        action="store_true",
        help="with --fleet and --baselines: every passing host's record replaces its baseline",
    )
    parser.add_argument(
        "--history",
        type=Path,
        metavar="DIR",
        help="each host's figures over time: the directory that holds the runs "
        "(results/acceptance)",
    )
    parser.set_defaults(func=run)


def is_sweep_dir(path: Path) -> bool:
    return path.is_dir() and (path / SWEEP_DATABASE).is_file()


def run(args: argparse.Namespace) -> int:
    if args.inventory is not None and args.fleet is None:
        raise WorkloadError("--inventory goes with --fleet",
                            "run `workloads report --fleet RUN_DIR --inventory FILE`")
    if (args.baselines is not None or args.renew_baselines) and args.fleet is None:
        raise WorkloadError("--baselines and --renew-baselines go with --fleet",
                            "run `workloads report --fleet RUN_DIR --baselines BDIR`")
    if args.renew_baselines and args.baselines is None:
        raise WorkloadError("--renew-baselines needs --baselines BDIR",
                            "name the baselines directory (results/acceptance/baselines)")
    if args.history is not None:
        if args.inputs or args.fleet is not None:
            raise WorkloadError("--history takes one directory and no other paths",
                                "run `workloads report --history results/acceptance` on its own")
        from workloads.fleet.command import render_history

        text, page = render_history(args.history, args.output)
        print(text, end="")
        print(page)
        return 0
    if args.fleet is not None:
        if args.inputs:
            raise WorkloadError("--fleet takes one run directory and no other paths",
                                "run `workloads report --fleet DIR` on its own")
        from workloads.fleet.command import render_fleet, summary_line

        fleet, written = render_fleet(args.fleet, args.output, args.baselines,
                                      renew=args.renew_baselines, inventory=args.inventory)
        print(summary_line(fleet))
        for path in written:
            print(path)
        return 0
    if not args.inputs:
        raise WorkloadError("nothing to report", "give a sweep directory, records, or --fleet DIR")
    missing = [p for p in args.inputs if not p.exists()]
    if missing:
        raise WorkloadError(f"{missing[0]} does not exist", "check the path")
    sweeps = [p for p in args.inputs if is_sweep_dir(p)]
    if sweeps and len(args.inputs) > 1:
        raise WorkloadError(
            "a sweep directory must be reported on its own",
            "run `workloads report SWEEP_DIR` once per sweep",
        )
    if sweeps:
        from workloads.report.sweep_report import render_sweep_report

        written = render_sweep_report(sweeps[0], args.output)
    else:
        try:
            from tfhost.report import render_records
        except ImportError as exc:
            raise WorkloadError(
                "record plots need the host-side package `tfhost`",
                "install the project with `pip install -e .` from its checkout",
            ) from exc
        written = render_records(args.inputs, args.output or Path("report"))
    for path in written:
        print(path)
    return 0
