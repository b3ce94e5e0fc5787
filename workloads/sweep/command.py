"""``workloads sweep SPEC.yaml``: a parameter study of one workload over all GPUs.

Expands the spec with psweep (star: one parameter at a time around the defaults;
grid: the full product) and runs every parameter set as its own process,
bound to one device slot through CUDA_VISIBLE_DEVICES before the framework
starts. Each run's row lands in <dir>/database.pk (psweep's format) the moment
the run ends, failures included, with the error. Started again with the same
spec, a sweep runs only what is not done yet; a second sweep in the same
directory is refused while the first runs.

devices:
  --devices all       every visible GPU (CUDA_VISIBLE_DEVICES is honoured); CPU when none
  --devices 0,2       GPUs 0 and 2 only
  --devices cpu       CPU workers (GPUs hidden with CUDA_VISIBLE_DEVICES='')
  --per-device K      K runs share each device (small images leave a GPU idle);
                      with CPU workers, K workers split the cores between them

backends:
  --backend local     (default) the runs start here, on this machine's devices
  --backend slurm     the runs left are submitted as ONE SLURM job array: each array
                      task is one run on one GPU (--gres gpu:1), adding its row to the
                      same database through 'workloads sweep SPEC --dir DIR --run-one ID';
                      rerun the same command to resume, exactly as with the local backend.
                      A job array rather than dask-jobqueue: every run is a job SLURM knows
                      (squeue, sacct, scancel and requeue per task), nothing has to stay
                      alive on the login node for the sweep's days, and no Dask scheduler
                      or dask.distributed is needed between SLURM and psweep's database.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from workloads.errors import WorkloadError

EPILOG = """\
spec (YAML; parameter names are the workload's options with _, e.g. learning_rate):
  workload: style                         style, cifar10, or a module path (pkg.command)
  mode: star                              star: one parameter at a time; grid: the product
  defaults: {width: 512, weights: random} fixed values, and the centre of the star
  vary:
    learning_rate: [1, 3, 10]
    tv_weight: {linspace: [0, 600, 50]}   also geomspace; a list may mix values and ranges
  output: out.png                         optional: file name of each run's output

examples:
  workloads sweep examples/style_study.yaml                       the published study
                                      elcorto/style_transfer_parameter_sweep, all GPUs
  workloads sweep study.yaml --devices 0,1 --per-device 2         4 runs at once on 2 GPUs
  workloads sweep study.yaml --dry-run                            list the runs and their state
  workloads sweep study.yaml --retry-failed                       run the failed ones again
  workloads sweep study.yaml --workers-scan 1,2,4 --scan-runs 8   runs/hour for 1, 2, 4 workers
  workloads sweep study.yaml --backend slurm --array-parallel 8 \
      --sbatch-arg=--partition=gpu --sbatch-arg=--time=01:00:00  job array, 8 runs at once
  workloads report results/sweeps/study                           contact sheet, explorer, CSV

files in the sweep directory (default $WORKLOADS_RESULTS/sweeps/<spec name>):
  database.pk        psweep database (pandas DataFrame; psweep.df_read), one row per run
  <pset_id>/         one run: its output, its JSON record, run.log
  sweep.yaml         the spec as last run, with every value normalised
  slurm/             --backend slurm: array.sbatch, psets.txt (task N runs line N+1),
                     submissions.jsonl, one log per task (<job>_<task>.out)
"""


def register(sub: Any) -> None:
    from workloads.cli import positive_float, positive_int

    parser = sub.add_parser(
        "sweep",
        help="parameter study over many GPUs: psweep database, resumable",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("spec", type=Path, metavar="SPEC.yaml", help="the sweep spec")
    parser.add_argument("--dir", type=Path, metavar="DIR",
                        help="sweep directory (default: $WORKLOADS_RESULTS/sweeps/<spec name>)")
    parser.add_argument("--devices", default="all", metavar="LIST",
                        help="all (default), cpu, or GPU indexes such as 0,1,3")
    parser.add_argument("--per-device", type=positive_int, default=1, metavar="K",
                        help="runs sharing one device at once (default: 1)")
    parser.add_argument("--retry-failed", action="store_true",
                        help="run failed runs again (default: keep their failure, skip them)")
    parser.add_argument("--run-timeout", type=positive_float, metavar="SECONDS",
                        help="stop and record as failed any run taking longer")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the runs with their id and state; run nothing")
    parser.add_argument("--run-one", metavar="ID",
                        help="run one pset (id, hash or plan index) on the devices this process "
                             "sees and add its row; for job-array tasks (rows share "
                             "$WORKLOADS_SWEEP_RUN_ID as _run_id when it is set)")
    parser.add_argument("--backend", choices=("local", "slurm"), default="local",
                        help="local (default): run here; slurm: submit the runs left as one "
                             "SLURM job array (see 'backends' above)")
    slurm = parser.add_argument_group("--backend slurm")
    slurm.add_argument("--sbatch-arg", action="append", default=[], metavar="ARG",
                       help="an option for sbatch, repeatable: --sbatch-arg=--partition=gpu "
                            "--sbatch-arg=--time=01:00:00")
    slurm.add_argument("--array-parallel", type=positive_int, metavar="K",
                       help="at most K array tasks at once (sbatch --array=...%%K; default: "
                            "as many as SLURM grants)")
    slurm.add_argument("--gres", metavar="SPEC",
                       help="generic resources per run (default: gpu:1; 'none' for CPU-only "
                            "clusters)")
    slurm.add_argument("--launcher", metavar="CMD",
                       help="command that runs Python on the nodes (default: this Python, "
                            f"{sys.executable}), e.g. 'apptainer exec --nv IMAGE.sif python3'")
    slurm.add_argument("--wait", action="store_true",
                       help="wait for the array to end, then print the results table")
    parser.add_argument("--workers-scan", metavar="N,N,...",
                        help="measure runs/hour with each worker count (e.g. 1,2,4) and the "
                             "speedup over the first; writes <dir>/scaling.json")
    parser.add_argument("--scan-runs", type=positive_int, metavar="N",
                        help="runs per --workers-scan step: the first N of the plan (default: all)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workloads.sweep.expand import expand
    from workloads.sweep.spec import load_spec

    spec = load_spec(args.spec)
    plan = expand(spec)
    directory = sweep_directory(args.dir, args.spec)
    if args.dry_run:
        from workloads.sweep.session import print_plan

        return print_plan(spec, plan, directory)
    _check_backend_options(args)
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.run_one is not None:
            from workloads.sweep.session import run_one

            return run_one(spec, plan, directory, args.run_one, args.run_timeout)
        if args.backend == "slurm":
            from workloads.sweep.slurm import ArrayOptions, submit_sweep

            options = ArrayOptions.from_args(args)
            return submit_sweep(spec, plan, directory, options, args.retry_failed)
        slots = _slots(args)
        if args.workers_scan:
            from workloads.sweep.scaling import parse_counts, scan

            counts = parse_counts(args.workers_scan, len(slots), args.scan_runs, len(plan))
            return scan(spec, plan, directory, slots, counts, args.scan_runs, args.run_timeout)
        from workloads.sweep.session import run_sweep

        return run_sweep(spec, plan, directory, slots, args.retry_failed, args.run_timeout)
    finally:
        signal.signal(signal.SIGTERM, previous)


def sweep_directory(given: Path | None, spec_path: Path) -> Path:
    """The sweep's directory, created and checked before anything is written in it.

    Checked (:func:`workloads.safefs.trusted_directory`): yours, writable by nobody
    else, and no directory above it writable by everyone without the sticky bit.
    In a shared directory, links planted for the sweep's files would otherwise
    choose where its writes land, and its pickled database who runs what.
    """
    from workloads.records import ensure_writable
    from workloads.safefs import directory_fd, make_directory

    if given is None:
        base = Path(os.environ.get("WORKLOADS_RESULTS", "results"))
        given = base / "sweeps" / Path(spec_path).stem
    directory = Path(given).expanduser()
    if directory.exists() and not directory.is_dir():
        raise WorkloadError(f"--dir {directory} is a file", "give a directory for the sweep")
    if not directory.exists():
        # Created private to writers whatever the umask (002 on many systems): the
        # database is only ever read from a directory nobody else may write.
        make_directory(directory)
    with directory_fd(directory):
        pass  # the trust check, before the probe below writes anything in it
    ensure_writable(directory / "database.pk")
    return directory


def _check_backend_options(args: argparse.Namespace) -> None:
    """Options of one backend given to the other: refused, not silently ignored."""
    if args.backend == "slurm":
        local = [name for name, given in (
            ("--devices", args.devices != "all"),
            ("--per-device", args.per_device != 1),
            ("--workers-scan", args.workers_scan is not None),
        ) if given]
        if local and args.run_one is None:
            raise WorkloadError(
                f"{local[0]} picks this machine's devices, not a SLURM job's",
                "drop it; each array task gets the GPU of --gres (default gpu:1)",
            )
        return
    slurm = [name for name, given in (
        ("--sbatch-arg", bool(args.sbatch_arg)),
        ("--array-parallel", args.array_parallel is not None),
        ("--gres", args.gres is not None),
        ("--launcher", args.launcher is not None),
        ("--wait", args.wait),
    ) if given]
    if slurm:
        raise WorkloadError(
            f"{slurm[0]} applies to --backend slurm only",
            "add --backend slurm, or drop it for a local sweep",
        )


def _slots(args: argparse.Namespace) -> list[Any]:
    from workloads.sweep.slots import build_slots, parse_devices, visible_gpus

    return build_slots(parse_devices(args.devices), args.per_device, visible_gpus())


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (kill, systemd, a scheduler's preemption) ends the sweep like Ctrl-C."""
    print(f"workloads sweep: received {signal.Signals(signum).name}", file=sys.stderr)
    raise KeyboardInterrupt
