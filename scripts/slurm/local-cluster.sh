#!/usr/bin/env bash
# A one-machine SLURM cluster (munged + slurmctld + slurmd) for tests and for trying the
# sbatch templates without a real cluster.
#
#   scripts/slurm/local-cluster.sh start   # prints: export SLURM_CONF=...
#   scripts/slurm/local-cluster.sh stop
#   scripts/slurm/local-cluster.sh env
#
# The node is declared as `localhost` with TFHOST_SLURM_CPUS CPUs (default 4, more than a
# small CI machine has: `config_overrides`), so two or more tasks run at once. Everything
# lives under TFHOST_SLURM_DIR (default /run/tfhost-slurm): its own munge key and socket, its
# own slurm.conf, state and logs; the daemons talk over 127.0.0.1 on TFHOST_SLURM_PORT and
# the next port. Needs root and Debian's slurm-wlm and munge. TFHOST_SLURM_HEALTHCHECK, when set,
# is the node's HealthCheckProgram, run every TFHOST_SLURM_HEALTHCHECK_INTERVAL seconds (default
# 2) in any node state, as slurm.conf(5) describes. TFHOST_SLURM_REBOOT_PROGRAM, when set, is the
# RebootProgram (so `scontrol reboot ASAP` can be asked for; give one that does not reboot).
# TFHOST_SLURM_RETURN_TO_SERVICE is slurm.conf's ReturnToService (default 2: a node set DOWN comes
# back when slurmd registers; 1 keeps a node an administrator set DOWN down).
# TFHOST_SLURM_NODES, when set, names more nodes (space-separated), in the same partition, with
# no slurmd behind them: stand-ins for other hosts (the Ansible tests' containers) whose state a
# play sets with scontrol (drain, resume). They start IDLE (set so by scontrol: they never
# register, and no job runs on them).
set -euo pipefail

dir=${TFHOST_SLURM_DIR:-/run/tfhost-slurm}
cpus=${TFHOST_SLURM_CPUS:-4}
healthcheck=${TFHOST_SLURM_HEALTHCHECK:-}
healthcheck_interval=${TFHOST_SLURM_HEALTHCHECK_INTERVAL:-2}
reboot_program=${TFHOST_SLURM_REBOOT_PROGRAM:-}
return_to_service=${TFHOST_SLURM_RETURN_TO_SERVICE:-2}
port=${TFHOST_SLURM_PORT:-16817}
extra_nodes=${TFHOST_SLURM_NODES:-}
conf="$dir/slurm.conf"

die() { echo "local-cluster: $*" >&2; exit 1; }
alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

write_config() {
  local lib node nodes=localhost
  for node in $extra_nodes; do
    [[ $node =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] || die "'$node' in TFHOST_SLURM_NODES is not a node name"
    nodes+=",$node"
  done
  lib=$(dirname "$(find /usr/lib -name auth_munge.so -path '*slurm*' -print -quit)")
  cat >"$conf" <<CONF
# Written by scripts/slurm/local-cluster.sh: a one-node cluster on loopback.
ClusterName=tfhost-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
PluginDir=$lib
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=$return_to_service
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=600
KillWait=5
${healthcheck:+HealthCheckProgram=$healthcheck
HealthCheckInterval=$healthcheck_interval
HealthCheckNodeState=ANY}
${reboot_program:+RebootProgram=$reboot_program}
CONF
  # The stand-ins come first: SLURM takes any unknown name for `localhost` while that is the
  # only node it has read ("Duplicated NodeHostName").
  for node in $extra_nodes; do
    echo "NodeName=$node NodeAddr=127.0.0.1 CPUs=1 RealMemory=1024 State=UNKNOWN" >>"$conf"
  done
  echo "NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=1024 State=UNKNOWN" >>"$conf"
  echo "PartitionName=local Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" >>"$conf"
}

start() {
  [[ $(id -u) -eq 0 ]] || die "run as root (slurmd and munged need it)"
  command -v slurmctld >/dev/null || die "slurm-wlm missing: apt-get install -y slurm-wlm munge"
  command -v munged >/dev/null || die "munge missing: apt-get install -y munge"
  mkdir -p "$dir"/{state,spool,munge}
  chmod 700 "$dir/munge"
  if ! alive "$dir/munge/munged.pid"; then
    [[ -f $dir/munge/munge.key ]] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=128 status=none; chmod 400 "$dir/munge/munge.key"; }
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
      --seed-file="$dir/munge/munged.seed"
  fi
  write_config
  export SLURM_CONF=$conf
  alive "$dir/slurmctld.pid" || slurmctld -f "$conf" -i
  alive "$dir/slurmd.pid" || slurmd -f "$conf"
  for _ in $(seq 1 60); do
    if sinfo -h -n localhost -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      for node in $extra_nodes; do  # UNKNOWN (never registered) to IDLE: by DOWN, as SLURM allows
        if ! { scontrol update "nodename=$node" state=down reason="local-cluster: stand-in" >/dev/null &&
          scontrol update "nodename=$node" state=resume >/dev/null; }; then
          die "cannot set $node idle"
        fi
      done
      echo "export SLURM_CONF=$conf"
      return 0
    fi
    scontrol update nodename=localhost state=resume >/dev/null 2>&1 || true
    sleep 0.5
  done
  die "the node did not become idle within 30 s; see $dir/slurmctld.log and $dir/slurmd.log"
}

stop() {
  local pidfile
  for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    if alive "$pidfile"; then
      kill "$(cat "$pidfile")"
      for _ in $(seq 1 40); do alive "$pidfile" || break; sleep 0.25; done
    fi
  done
  rm -rf "$dir/state"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$conf" ;;
  *) die "usage: $0 start|stop|env" ;;
esac
