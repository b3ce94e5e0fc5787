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
# Why someone else could change $1 or a directory above it (nothing: trusted): each must be
# a real directory owned by you or root, not writable by group or others unless sticky.
untrusted_path() {
  local path=$1 owner mode
  while :; do
    [[ -L $path || ! -d $path ]] && { echo "$path is not a directory"; return; }
    read -r owner mode < <(stat -c '%u %a' "$path")
    [[ $owner == 0 || $owner == "$(id -u)" ]] || { echo "$path is owned by uid $owner"; return; }
    if (( 8#$mode & 8#022 )) && ! (( 8#$mode & 8#1000 )); then
      echo "$path is writable by others (mode $mode)"; return
    fi
    [[ $path == / ]] && return
    path=$(dirname "$path")
  done
}
# True if $1 is a regular file (not a link) of yours, writable by nobody else, whose bytes
# hash to the digest recorded beside it when it was built.
shim_verified() {
  local file=$1 sum
  for sum in "$file" "$file.sha256"; do
    [[ -f $sum && ! -L $sum && $(stat -c '%u' "$sum") == "$(id -u)" ]] || return 1
    (( 8#$(stat -c '%a' "$sum") & 8#022 )) && return 1
  done
  [[ $(sha256sum <"$file" | cut -d' ' -f1) == "$(cat "$file.sha256")" ]]
}
# The preload library of workloads/netbind, built once per source version and node into
# netbind-<uid>, a directory only you can write (mode 700, checked with every directory
# above it), with the digest of the bytes built beside it; anything else found there is
# rebuilt, never mounted. Prints its path, or one line saying why not.
build_bind_shim() {
  local source=$repo/workloads/netbind/bindaddr.c dir problem hash out tmp
  dir=${XDG_CACHE_HOME:-$HOME/.cache}/tfhost/netbind-$(id -u)
  (umask 022 && mkdir -p "$(dirname "$dir")") && { mkdir -m 700 "$dir" 2>/dev/null || true; }
  problem=$(untrusted_path "$dir")
  [[ -n $problem || $(stat -c '%u %a' "$dir") == "$(id -u) 700" ]] ||
    problem="$dir is not private to you (mode $(stat -c '%a' "$dir"), not 700)"
  if [[ -n $problem ]]; then
    echo "run-workloads: no private directory for the worker bind library: $problem; remove it or set XDG_CACHE_HOME to a directory only you can write" >&2
    return 2
  fi
  hash=$(sha256sum "$source" | cut -c1-16)
  out=$dir/libbindaddr-$hash.so
  if ! shim_verified "$out"; then
    tmp=$(mktemp "$dir/.cc-XXXXXX")
    if ! "${CC:-cc}" -O2 -shared -fPIC -o "$tmp" "$source" >&2; then
      rm -f "$tmp"
      echo "run-workloads: cannot build workloads/netbind/bindaddr.c on $(hostname): install gcc, or set WORKLOADS_WORKER_BIND=any on a fully trusted network" >&2
      return 2
    fi
    chmod 755 "$tmp" && sync "$tmp"
    sha256sum <"$tmp" | cut -d' ' -f1 >"$tmp.sha256" && chmod 644 "$tmp.sha256"
    mv -f "$tmp.sha256" "$out.sha256" && mv -f "$tmp" "$out"
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
      shim=$(build_bind_shim) || exit 2
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
