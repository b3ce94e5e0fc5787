#!/usr/bin/env bash
# Run `workloads ARGS...` inside a SLURM job, in a Python environment or in the benchmark image.
#
# Used by the sbatch templates beside this file (each srun task calls it). Choose the
# runtime with environment variables, exported to the job by sbatch:
#   WORKLOADS_RUNTIME=venv      (default) WORKLOADS_VENV=/path/to/.venv  (default: repo's .venv)
#   WORKLOADS_RUNTIME=apptainer WORKLOADS_IMAGE=/shared/images/tfhost-ngc.sif
# Apptainer (formerly Singularity) is the container runtime most HPC sites run; `--nv` binds
# the host's NVIDIA driver into the container, and only the GPUs SLURM granted are visible.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
runtime=${WORKLOADS_RUNTIME:-venv}
die() { echo "run-workloads: $*" >&2; exit 2; }

case $runtime in
  venv)
    venv=${WORKLOADS_VENV:-$repo/.venv}
    [[ -x $venv/bin/workloads ]] || die "no workloads in $venv; run scripts/bootstrap.sh gpu there or set WORKLOADS_VENV"
    exec "$venv/bin/workloads" "$@"
    ;;
  apptainer | singularity)
    image=${WORKLOADS_IMAGE:-}
    [[ -n $image && -f $image ]] || die "WORKLOADS_IMAGE must name a .sif file (see scripts/slurm/README.md)"
    command -v "$runtime" >/dev/null || die "$runtime not found on $(hostname); load its module or install it"
    exec "$runtime" exec --nv --bind "${WORKLOADS_RESULTS_DIR:-$PWD}:/results" "$image" workloads "$@"
    ;;
  *)
    die "WORKLOADS_RUNTIME=$runtime is not venv or apptainer"
    ;;
esac
