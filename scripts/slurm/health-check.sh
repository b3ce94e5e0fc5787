#!/usr/bin/env bash
# SLURM HealthCheckProgram: `workloads health --slurm` on this node, within a deadline.
#
#   install -o root -g root -m 0755 scripts/slurm/health-check.sh /etc/slurm/workloads-health-check
#   slurm.conf:  HealthCheckProgram=/etc/slurm/workloads-health-check
#                HealthCheckInterval=300
#                HealthCheckNodeState=ANY
#
# slurmd runs it as root with an environment of its own (SLURMD_NODENAME only: no PATH, no
# SLURM_CONF) and kills it after 60 s, so this script sets PATH, reads its settings from
# workloads-health.conf beside itself, and gives `workloads health` a deadline inside that
# (DEADLINE, default 40 s) with `timeout` as a backstop. The settings file holds KEY=VALUE
# lines, read as data (never sourced), and must be root's and writable by nobody else:
#
#   WORKLOADS=/opt/tf-gpu-host/.venv/bin/workloads   # the workloads executable
#   SLURM_CONF=/etc/slurm/slurm.conf                 # for scontrol, where it is not the default
#   DEADLINE=40                                      # seconds
#   HEALTH_ARGS=--state /var/lib/workloads/health-state.json   # more options, split on spaces
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH LC_ALL=C

die() { echo "workloads-health-check: $*" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd -P) || die "cannot find the directory of $0"
conf="$here/workloads-health.conf"
workloads=workloads
deadline=40
args=()

if [[ -e $conf ]]; then
  [[ -f $conf && ! -L $conf ]] || die "$conf is not a regular file"
  read -r owner mode < <(stat -c '%u %a' "$conf") || die "cannot stat $conf"
  [[ $owner == "$(id -u)" ]] || die "$conf is owned by uid $owner, not by $(id -u): chown it"
  (( (8#$mode & 8#022) == 0 )) || die "$conf is writable by group or others (mode $mode): chmod go-w"
  while IFS= read -r line || [[ -n $line ]]; do
    [[ -z ${line//[[:space:]]/} || $line == \#* ]] && continue
    key=${line%%=*}
    value=${line#*=}
    case $key in
      WORKLOADS) workloads=$value ;;
      SLURM_CONF) export SLURM_CONF="$value" ;;
      DEADLINE)
        if ! [[ $value =~ ^[0-9]{1,3}$ ]] || (( value < 1 || value > 55 )); then
          die "DEADLINE=$value in $conf: give whole seconds, 1 to 55 (slurmd kills at 60)"
        fi
        deadline=$value ;;
      HEALTH_ARGS) read -r -a args <<< "$value" ;;
      *) die "unknown setting '${key:0:40}' in $conf: WORKLOADS, SLURM_CONF, DEADLINE, HEALTH_ARGS" ;;
    esac
  done < "$conf"
fi

command -v "$workloads" >/dev/null || die "'$workloads' not found: set WORKLOADS= in $conf"
exec timeout -k 5 "$((deadline + 5))" "$workloads" health --slurm --deadline "$deadline" "${args[@]}"
