#!/usr/bin/env python3
"""Where site.yml's time goes: converge and idle re-run on the suite's stand-ins, per OS.

    sudo .venv/bin/python scripts/bench-ansible.py                 # Debian 12, one host
    sudo .venv/bin/python scripts/bench-ansible.py --os ubuntu2404 --os rocky9 --reruns 3
    sudo .venv/bin/python scripts/bench-ansible.py --hosts 1 2 4 8  # a fleet as it grows

Prints, for each OS and fleet size, a summary (wall time, per host, module executions on
the hosts, recap counts, the controller's CPU time and peak memory) and the costliest tasks
of the converge and of the last re-run; writes everything, every task, as JSON (--json).
The stand-ins are systemd containers on the suite's private Docker engine
(scripts/docker-engine.sh), so it runs where the suite runs, as root. Figures are wall
times on a shared machine: run it idle, and more than once.
"""

from __future__ import annotations

import argparse
import json
import platform as host_platform
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.ansible.bench_profile import (  # noqa: E402
    ProfileError,
    RunCost,
    role_table,
    summary_table,
    task_table,
    to_json,
)
from workloads import safefs  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    from tests.ansible.bench import PLATFORMS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--os", dest="oses", action="append", choices=sorted(PLATFORMS),
                        help="stand-in OS (repeat for several; default debian12)")
    parser.add_argument("--hosts", type=int, nargs="+", default=[1], metavar="N",
                        help="fleet sizes to converge at once (default 1)")
    parser.add_argument("--reruns", type=int, default=1, help="idle re-runs after the converge")
    parser.add_argument("--forks", type=int, default=None, help="override ansible.cfg's forks")
    parser.add_argument("--top", type=int, default=25, help="tasks shown per run")
    parser.add_argument("--json", type=Path, default=REPO / "results" / "bench-ansible.json")
    parser.add_argument("--tree", dest="trees", action="append", default=[], metavar="LABEL=PATH",
                        help="compare checkouts: the first converges, re-runs alternate on the "
                             "same hosts (e.g. --tree main=/work/main --tree this=.)")
    parser.add_argument("--keep", action="store_true", help="leave the stand-ins running")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.hosts) or args.reruns < 0:
        parser.error("--hosts must be 1 or more and --reruns 0 or more")
    args.oses = args.oses or ["debian12"]
    trees = {}
    for spec in args.trees:
        label, _, path = spec.partition("=")
        if not label or not (Path(path) / "ansible" / "site.yml").is_file():
            parser.error(f"--tree {spec!r}: want LABEL=PATH, PATH a checkout with ansible/site.yml")
        trees[label] = Path(path).resolve()
    args.trees = trees
    return args


def report(runs: list[RunCost], top: int) -> str:
    """The printed tables: summary, then converge and last re-run per task and per role."""
    parts = [summary_table(runs)]
    last = {run.label.split("(")[-1]: run for run in runs[1:]}  # each tree's last re-run
    shown = [runs[0], *last.values()]
    for run in shown:
        parts += [task_table(run, top), role_table(run)]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from tests.ansible.bench import PLATFORMS, bench_platform, open_bench_lab, snapshot_trees
    from tests.support.docker_engine import ensure_engine

    try:
        ensure_engine()
    except BaseException as error:  # pytest.skip outside pytest, or dockerd failing
        print(f"bench-ansible: no Docker engine ({error}); fix: run as root where "
              "scripts/docker-engine.sh can start one", file=sys.stderr)
        return 2
    results: list[dict[str, object]] = []
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-ansible-") as temp:
        workdir = Path(temp)
        trees = snapshot_trees(args.trees, workdir) if args.trees else None
        rocky = any(PLATFORMS[key].pkg_mgr == "dnf" for key in args.oses)
        with open_bench_lab(workdir, rocky) as bench:
            for key in args.oses:
                for count in args.hosts:
                    try:
                        runs = bench_platform(bench, PLATFORMS[key], count, args.reruns,
                                              workdir, keep=args.keep,
                                              forks=args.forks, trees=trees)
                    except (ProfileError, RuntimeError) as error:
                        print(f"bench-ansible: {key} x{count}: {error}", file=sys.stderr)
                        failed = True
                        continue
                    print(f"\n## {key}, {count} host(s)\n\n{report(runs, args.top)}", flush=True)
                    failed |= any(run.returncode != 0 for run in runs)
                    results.append(json.loads(to_json(runs, {
                        "os": key, "hosts": count, "forks": args.forks,
                        "machine": host_platform.node(), "cpus": _cpus()})))
    safefs.ensure_directory(args.json.parent)
    safefs.write_text(args.json, json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {args.json}")
    return 1 if failed else 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0))


if __name__ == "__main__":
    sys.exit(main())
