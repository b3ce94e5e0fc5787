"""``workloads bench fleet``: what the fleet step costs at scale, and how often it is wrong.

Without --rates: writes HOSTS records of the battery's full shape (GPUS per host, one host
in fifty with a GPU at 60 %) into a temporary directory, then times what `accept.yml` does
on the controller after gathering: read every record, judge the fleet, render the four
outputs. Prints and writes the time of each phase, the controller's peak memory
(tracemalloc's peak of Python objects, in an untimed second pass, and the process's max
RSS), the size of one record and of each output.

With --rates N: the verdict's false-positive and miss rates. For each scenario (a healthy
fleet of 3-16 hosts, of two hosts, of two GPU models; one host with a GPU missing, an NVLink
down, a GPU 5-30 % slow, a check or a matmul dtype missing, an empty or unfinished record,
no record though the inventory lists it, a record cut short, a GPU of another model, a UUID
twice; one machine's record under two names; one of two hosts 40 % slow), N fleets of
3-16 hosts (2 where the scenario says so) of GPUS GPUs, every
figure within ±NOISE % of its healthy value, generated from a fixed seed (the same figures
on every run). Prints a table (planted hosts judged pass = misses; healthy hosts judged
anything but pass = false positives) and writes it as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from workloads import safefs
from workloads.cli import positive_int
from workloads.records import ensure_writable, new_record, write_record


def register_bench(sub: Any) -> None:
    """Add ``fleet`` to the subparsers of ``workloads bench``."""
    parser = sub.add_parser("fleet", help="the fleet report's time and memory for many hosts",
                            description=__doc__,
                            formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=positive_int, default=1000,
                        help="hosts in the synthetic fleet (default: 1000)")
    parser.add_argument("--gpus", type=positive_int, default=8, help="GPUs per host (default: 8)")
    parser.add_argument("--rates", type=positive_int, metavar="N",
                        help="measure the false-positive and miss rates over N generated "
                             "fleets per scenario instead of the time and memory")
    parser.add_argument("--noise", type=noise_percent, default=3.0, metavar="PCT",
                        help="with --rates: healthy figures scatter within ±PCT %% (default: 3)")
    parser.add_argument("--output", type=Path, default=None,
                        help="JSON with all figures (default: results/bench-fleet.json, "
                             "results/bench-fleet-rates.json with --rates)")
    parser.set_defaults(func=run)


def noise_percent(text: str) -> float:
    """argparse type: a share in per cent, 0 <= PCT < 50 (a healthy figure stays positive)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of per cent") from None
    if not 0 <= value < 50:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 50, got {value:g}")
    return value


def run(args: argparse.Namespace) -> int:
    if args.rates:
        return run_rates(args)
    args.output = args.output or Path("results/bench-fleet.json")
    return run_scale(args)


def run_rates(args: argparse.Namespace) -> int:
    from workloads.fleet.rates import measure, table

    output = ensure_writable(args.output or Path("results/bench-fleet-rates.json"))
    start = time.perf_counter()
    tallies = measure(args.rates, args.gpus, args.noise / 100)
    seconds = time.perf_counter() - start
    print(f"fleet verdict over {args.rates} generated fleets per scenario: 3-16 hosts × "
          f"{args.gpus} GPUs, figures within ±{args.noise:g} %, seed 0")
    print(table(tallies))
    print(f"{sum(t.fleets for t in tallies)} fleets judged in {seconds:.1f} s")
    record = new_record("bench-fleet-rates", fleets_per_scenario=args.rates,
                        gpus_per_host=args.gpus, noise=args.noise / 100, seed=0,
                        seconds=seconds, scenarios=[t.as_dict() for t in tallies])
    record["status"] = "done"
    write_record(record, output)
    print(f"record: {output}")
    return 0


def run_scale(args: argparse.Namespace) -> int:
    from workloads.fleet.command import render_fleet
    from workloads.fleet.load import load_fleet
    from workloads.fleet.synthetic import synthetic_record
    from workloads.fleet.verdict import judge

    output = ensure_writable(args.output)
    rng = random.Random(0)
    figures: dict[str, Any] = {"hosts": args.hosts, "gpus_per_host": args.gpus}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        safefs.ensure_directory(run_dir)
        start = time.perf_counter()
        for index in range(args.hosts):
            host = f"gpu{index:05d}"
            slow = rng.randrange(args.gpus) if index % 50 == 7 else None
            text = json.dumps(synthetic_record(host, args.gpus, rng, slow), indent=1)
            safefs.write_text(run_dir / f"{host}.json", text)
        figures["write_records_s"] = time.perf_counter() - start
        sizes = [p.stat().st_size for p in run_dir.glob("*.json")]
        figures["record_bytes"] = sizes[0]
        figures["records_bytes_total"] = sum(sizes)
        start = time.perf_counter()
        hosts = load_fleet(run_dir)
        figures["read_s"] = time.perf_counter() - start
        start = time.perf_counter()
        fleet = judge(hosts)
        figures["judge_s"] = time.perf_counter() - start
        start = time.perf_counter()
        _, written = render_fleet(run_dir, Path(tmp) / "report")
        figures["report_s"] = time.perf_counter() - start
        figures["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        del hosts, fleet
        tracemalloc.start()  # a second pass: tracing slows Python down, so it is not timed
        fleet, _ = render_fleet(run_dir, Path(tmp) / "report")
        figures["python_peak_bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        figures["outputs_bytes"] = {p.name: p.stat().st_size for p in written}
        figures["verdicts"] = fleet.counts()
        figures["outliers"] = len(fleet.outliers)
    mib = 2**20
    total, peak, rss = (figures["records_bytes_total"] / mib, figures["python_peak_bytes"] / mib,
                        figures["max_rss_bytes"] / mib)
    print(f"fleet of {args.hosts} hosts × {args.gpus} GPUs: one record "
          f"{figures['record_bytes'] / 1024:.0f} KiB, all {total:.0f} MiB")
    print(f"read {figures['read_s']:.1f} s, judge {figures['judge_s']:.1f} s; the whole report "
          f"(read, judge, render, write) {figures['report_s']:.1f} s")
    print(f"memory: Python objects at their peak {peak:.0f} MiB, max RSS {rss:.0f} MiB")
    print("outputs: " + ", ".join(f"{name} {size / 2**20:.1f} MiB"
                                  for name, size in figures["outputs_bytes"].items()))
    print(f"verdicts: {figures['verdicts']}, {figures['outliers']} outlying figures")
    record = new_record("bench-fleet", **figures)
    record["status"] = "done"
    write_record(record, output)
    print(f"record: {output}")
    return 0
