"""``workloads bench fleet``: what the fleet step costs at scale, on synthetic records.

Writes HOSTS records of the battery's full shape (GPUS per host, a share with one slow
GPU) into a temporary directory, then times what `accept.yml` does on the controller after
gathering: read every record, judge the fleet, render the four outputs. Prints and writes
the time of each phase, the controller's peak memory (tracemalloc's peak of Python objects, in
an untimed second pass, and the process's max RSS), the size of one record and of each output.
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
    parser.add_argument("--output", type=Path, default=Path("results/bench-fleet.json"),
                        help="JSON with all figures (default: results/bench-fleet.json)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workloads.fleet.command import render_fleet
    from workloads.fleet.load import load_fleet
    from workloads.fleet.synthetic import synthetic_record
    from workloads.fleet.verdict import judge

    output = ensure_writable(args.output)
    rng = random.Random(0)
    figures: dict[str, Any] = {"hosts": args.hosts, "gpus_per_host": args.gpus}
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        run_dir.mkdir()
        start = time.perf_counter()
        for index in range(args.hosts):
            host = f"gpu{index:05d}"
            slow = rng.randrange(args.gpus) if index % 50 == 7 else None
            (run_dir / f"{host}.json").write_text(
                json.dumps(synthetic_record(host, args.gpus, rng, slow), indent=1))
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
