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
# The preload library of workloads/netbind, built once per source version and node
# (atomically: the tasks of one node start together); prints its path.
build_bind_shim() {
  local source=$repo/workloads/netbind/bindaddr.c cache hash out
  cache=${XDG_CACHE_HOME:-$HOME/.cache}/tfhost
  hash=$(sha256sum "$source" | cut -c1-16)
  out=$cache/libbindaddr-$hash.so
  if [[ ! -f $out ]]; then
    mkdir -p "$cache"
    "${CC:-cc}" -O2 -shared -fPIC -o "$out.$$" "$source" >&2 || return 1
    mv -f "$out.$$" "$out"
  fi
  echo "$out"
}

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
    binds=(--bind "${WORKLOADS_RESULTS_DIR:-$PWD}:/results")
    # Multi-task steps run TensorFlow workers: build the library that keeps them on the
    # node's address (workloads/netbind) with the host's compiler, as images carry none.
    if [[ ${SLURM_STEP_NUM_TASKS:-1} -gt 1 && ${WORKLOADS_WORKER_BIND:-node} != any ]]; then
      shim=$(build_bind_shim) || die "cannot build workloads/netbind/bindaddr.c on $(hostname): install gcc, or set WORKLOADS_WORKER_BIND=any on a fully trusted network"
      binds+=(--bind "$shim:/opt/workloads-netbind/libbindaddr.so:ro")
      export APPTAINERENV_WORKLOADS_BIND_SHIM=/opt/workloads-netbind/libbindaddr.so
      export SINGULARITYENV_WORKLOADS_BIND_SHIM=/opt/workloads-netbind/libbindaddr.so
    fi
    exec "$runtime" exec --nv "${binds[@]}" "$image" workloads "$@"
    ;;
  *)
    die "WORKLOADS_RUNTIME=$runtime is not venv or apptainer"
    ;;
esac
