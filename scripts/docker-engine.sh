#!/usr/bin/env bash
# Start or stop a private Docker engine for the test suite and for CI.
#
# Why a private engine: CI machines run no Docker daemon, and the network rule
# forbids Docker's default 172.17.x bridge. This engine listens on its own
# socket, creates no bridge and touches no iptables; containers use
# `--network host` or `--network none`. Its data root survives between runs on
# the same machine, so built base images are reused (a fresh machine builds them).
#
#   scripts/docker-engine.sh start   # prints: export DOCKER_HOST=unix://...
#   scripts/docker-engine.sh stop
#   scripts/docker-engine.sh env     # prints the DOCKER_HOST line only
set -euo pipefail

root=${TFHOST_DOCKER_ROOT:-/var/lib/tfhost-docker}
run=${TFHOST_DOCKER_RUN:-/run/tfhost-docker}
sock="$run/docker.sock"
pidfile="$run/dockerd.pid"
log="${TFHOST_DOCKER_LOG:-$run/dockerd.log}"

die() { echo "docker-engine: $*" >&2; exit 1; }

running() { [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

# dockerd outlives this script: it must not keep what the caller had open (a lock the
# caller holds with flock would stay held as long as the daemon runs).
close_inherited_fds() {
  local fd
  for fd in /proc/self/fd/*; do
    fd=${fd##*/}
    if (( fd > 2 )); then eval "exec $fd>&-" 2>/dev/null || true; fi
  done
}

case "${1:-}" in
  start)
    command -v dockerd >/dev/null || die "dockerd not found; install it: apt-get install -y docker.io"
    mkdir -p "$root" "$run"
    if ! running; then
      (close_inherited_fds
       exec dockerd --host "unix://$sock" --data-root "$root" --exec-root "$run/exec" \
         --pidfile "$pidfile" --bridge=none --iptables=false --ip6tables=false \
         --storage-driver=overlay2) >"$log" 2>&1 &
      for _ in $(seq 1 60); do
        DOCKER_HOST="unix://$sock" docker version >/dev/null 2>&1 && break
        sleep 0.5
      done
      DOCKER_HOST="unix://$sock" docker version >/dev/null 2>&1 \
        || die "dockerd did not answer within 30 s; see $log"
    fi
    echo "export DOCKER_HOST=unix://$sock"
    ;;
  stop)
    if running; then
      pid=$(cat "$pidfile")
      kill "$pid"
      for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    fi
    ;;
  env)
    echo "export DOCKER_HOST=unix://$sock"
    ;;
  *)
    die "usage: $0 start|stop|env"
    ;;
esac
