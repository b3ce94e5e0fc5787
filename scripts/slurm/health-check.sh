#!/usr/bin/env bash
# SLURM HealthCheckProgram: `workloads health --slurm` on this node, within a deadline; a check
# that hangs, crashes or runs out of time drains the node itself.
#
#   install -o root -g root -m 0755 scripts/slurm/health-check.sh /etc/slurm/workloads-health-check
#   slurm.conf:  HealthCheckProgram=/etc/slurm/workloads-health-check
#                HealthCheckInterval=300
#                HealthCheckNodeState=ANY
#
# slurmd runs it as root with an environment of its own (SLURMD_NODENAME only: no PATH, no
# SLURM_CONF), ignores what it prints and kills it after 60 s, logging only "rc:N". So this
# script sets PATH, reads its settings from workloads-health.conf beside itself, and gives
# `workloads health` a deadline inside that (DEADLINE, default 40 s). It never waits on the
# check itself: the check runs in a process group of its own, writing to a file, and this
# script polls for its exit status. When none comes by DEADLINE + 5 s the group gets TERM, then
# KILL 2 s later, and whatever still does not exit (a process stuck in the kernel on a wedged
# GPU) is left behind: the node is drained all the same. A check that exits non-zero (with
# --slurm it exits 0 once the node's state is right) is a crash (one killed by a signal is
# named: SIGSEGV), and so is one whose output reached OUTPUT_MIB. Either way the node is drained
# with "workloads-health: check ...; host; ACTION; since TIME" (the reason grammar of
# scripts/slurm/README.md), unless someone else drained it, it is DOWN or FAIL, or a reboot is
# pending: those are left as they are, and logged. Every decision is a line on stderr, in
# syslog (tag workloads-health) and, with LOG=, in that file. The settings file holds KEY=VALUE
# lines, read as data (never sourced), and must be root's and writable by nobody else:
#
#   WORKLOADS=/opt/tf-gpu-host/.venv/bin/workloads   # the workloads executable
#   SLURM_CONF=/etc/slurm/slurm.conf                 # for scontrol, where it is not the default
#   DEADLINE=40                                      # seconds, 1 to 40
#   HEALTH_ARGS=--state /var/lib/workloads/health-state.json   # more options, split on spaces
#   LOG=/var/log/workloads-health.log                # also append every run's lines here
set -u
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH LC_ALL=C

PREFIX="workloads-health:"
MAX_REASON=160  # workloads/accept/health/slurm.py MAX_REASON
OUTPUT_MIB=16   # the check's output is held to this (a check that floods fills no disk)
RELAYED=20      # at most this many of the check's lines go to syslog, after the drain
log_file=

die() { echo "workloads-health-check: $*" >&2; exit 2; }

say() {  # one decision: stderr, syslog, and LOG= when set
  echo "workloads-health-check: $*" >&2
  timeout -k 1 2 logger -t workloads-health -- "$*" 2>/dev/null || true
  [[ -n $log_file ]] && printf '%s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >>"$log_file" 2>/dev/null
  return 0
}

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
        if ! [[ $value =~ ^[0-9]{1,3}$ ]] || (( value < 1 || value > 40 )); then
          die "DEADLINE=$value in $conf: give whole seconds, 1 to 40 (slurmd kills at 60; TERM, KILL and the drain need the rest)"
        fi
        deadline=$value ;;
      HEALTH_ARGS) read -r -a args <<< "$value" ;;
      LOG)
        [[ $value == /* ]] || die "LOG=$value in $conf: give an absolute path"
        log_file=$value ;;
      *) die "unknown setting '${key:0:40}' in $conf: WORKLOADS, SLURM_CONF, DEADLINE, HEALTH_ARGS, LOG" ;;
    esac
  done < "$conf"
fi

command -v "$workloads" >/dev/null || die "'$workloads' not found: set WORKLOADS= in $conf"
node=${SLURMD_NODENAME:-$(hostname -s)}
[[ $node =~ ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ ]] || die "node name '${node:0:70}' is not a SLURM node name"

# --- run the check, never waiting on it --------------------------------------------------
work=$(mktemp -d /tmp/workloads-health.XXXXXX) || die "cannot make a temporary directory"
# The check's own lines go to syslog last, on every way out, and few of them: each is a
# `logger` call, and a slow syslog must not spend slurmd's 60 s before the drain.
# shellcheck disable=SC2317  # called from the EXIT trap
relay() {
  local line
  [[ -f $work/out ]] || return 0
  while IFS= read -r line; do
    say "check: $line"
  done < <(tail -c 4000 "$work/out" 2>/dev/null | tr -d '\0' |
           grep -a -E '^(slurm:|note:)|error:' | tail -n "$RELAYED")
}
trap 'relay; rm -rf "$work"' EXIT
started=$SECONDS
set -m  # the check's own process group, so TERM and KILL reach all of it
{ trap : TERM  # this shell outlives TERM to write the check's status; the check does not
  ulimit -f $((OUTPUT_MIB * 1024))  # KiB; past it a write gets SIGXFSZ
  "$workloads" health --slurm --node "$node" --deadline "$deadline" "${args[@]}" \
    >"$work/out" 2>&1 </dev/null; echo $? >"$work/rc.tmp" && mv "$work/rc.tmp" "$work/rc"; } &
group=$!
set +m

# Poll for the exit status until $1 seconds since the start have passed.
wait_until() {
  while [[ ! -f $work/rc ]] && (( SECONDS - started < $1 )); do sleep 0.2; done
  [[ -f $work/rc ]]
}

# Whether a process of group $1 is still there, not counting zombies.
group_alive() {
  local stat line st pg
  for stat in /proc/[0-9]*/stat; do
    read -r line < "$stat" 2>/dev/null || continue
    read -r st _ pg _ <<< "${line##*) }"
    [[ $pg == "$1" && $st != Z ]] && return 0
  done
  return 1
}

problem=
if ! wait_until $((deadline + 5)); then
  kill -TERM -- "-$group" 2>/dev/null
  if wait_until $((deadline + 7)); then
    problem="check timed out after $((SECONDS - started)) s (deadline $deadline s)"
  else
    kill -KILL -- "-$group" 2>/dev/null
    sleep 1
    problem="check hung: no exit on TERM, killed after $((SECONDS - started)) s"
    group_alive "$group" && problem+=" and still there (stuck in the kernel: reboot)"
  fi
fi
output=$(tail -c 4000 "$work/out" 2>/dev/null | tr -d '\0')
size=$(stat -c %s "$work/out" 2>/dev/null || echo 0)
if [[ -z $problem ]] && (( size >= OUTPUT_MIB * 1024 * 1024 )); then
  problem="check wrote over $OUTPUT_MIB MiB of output (cut there)"
fi
if [[ -z $problem ]]; then
  rc=$(<"$work/rc")
  (( rc == 0 )) && exit 0
  last=$(grep -a -v '^[[:space:]]*$' <<< "$output" | tail -n 1)
  last=${last#workloads health: error: }
  # a long path says less than the words after it: keep its last two parts
  last=$(sed -E 's#/([^ /]+/)+([^ /]+/[^ /]+)#.../\2#g' <<< "$last")
  if (( rc > 128 )) && signal=$(kill -l $((rc - 128)) 2>/dev/null); then
    problem="check crashed: SIG$signal (exit $rc) ${last:-with no output}"
  else
    problem="check failed (exit $rc) ${last:-with no output}"
  fi
fi

# --- drain, unless the node is not ours to drain -----------------------------------------
reason_of() {  # PREFIX + the grammar's fields, only scontrol-safe characters, cut between words
  local fault="$1" tail since
  since=$(date -u +%Y-%m-%dT%H:%MZ)
  tail="; host; run workloads health by hand; since $since"
  fault=$(tr -c 'A-Za-z0-9 .,:()/#+_-' ' ' <<< "$fault" | tr -s ' ')
  fault=${fault% }
  local room=$((MAX_REASON - ${#PREFIX} - 1 - ${#tail}))
  if (( ${#fault} > room )); then
    fault=${fault:0:$((room - 3))}
    fault="${fault% *}..."
  fi
  printf '%s %s%s' "$PREFIX" "$fault" "$tail"
}

shown=$(timeout -k 1 4 scontrol show node "$node" 2>&1) || {
  say "$problem; and scontrol show node $node failed: ${shown##*$'\n'}"; exit 2; }
state=$(grep -o 'State=[^[:space:]]*' <<< "$shown" | head -n 1)
state=${state#State=}
current=$(sed -n 's/^[[:space:]]*Reason=\(.*\)$/\1/p' <<< "$shown" | head -n 1)
[[ $current =~ ^(.*)\ \[[^]@]*@[^]]*\]$ ]] && current=${BASH_REMATCH[1]}
case "+$state+" in
  *+DOWN*|*+FAIL*|*+REBOOT*|*+POWER*)
    say "$problem; $node is $state (${current:-no reason}): left as it is"; exit 1 ;;
esac
if [[ +$state+ == *+DRAIN* ]]; then
  if [[ $current == "$PREFIX"* ]]; then
    say "$problem; $node stays drained: $current"
  else
    say "$problem; $node already drained by someone else (${current:-no reason}): left as it is"
  fi
  exit 1
fi
why=$(reason_of "$problem")
if out=$(timeout -k 1 4 scontrol update "nodename=$node" state=drain "reason=$why" 2>&1); then
  say "$node drained: $why"
  exit 1
fi
say "$problem; scontrol update nodename=$node state=drain failed: ${out##*$'\n'}"
exit 2
