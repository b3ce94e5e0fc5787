#!/usr/bin/env bash
# Boot the project's Debian 12 box with QEMU, reachable only on a loopback SSH port.
#
#   scripts/vm.sh start [--disk DISK.qcow2] [--key KEY] [--state DIR] [--ssh-port N]
#                       [--memory MiB] [--cpus N] [--accel auto|kvm|tcg] [--cpu MODEL]
#                       [--iommu] [--qemu-arg ARG]...
#   scripts/vm.sh wait-ssh [--state DIR] [--timeout SECONDS]
#   scripts/vm.sh ssh [--state DIR] [-- COMMAND...]
#   scripts/vm.sh stop [--state DIR] [--timeout SECONDS]
#
# Why QEMU directly and not `vagrant up`: vagrant-libvirt puts its guests on a
# libvirt bridge in 192.168.121.0/24, and the project's tests may only talk to
# 127.0.0.1. Here the guest sits behind QEMU's user-mode network stack with
# restrict=on (it can reach nothing outside QEMU), and the only way in is
# hostfwd=tcp:127.0.0.1:PORT-:22. Services the guest needs (apt proxy, stub
# repositories) are carried back to the host's loopback over that SSH
# connection with `ssh -R`, never over an address range.
#
# Without --disk, the box from scripts/build-box.sh is used (built if missing)
# with its vagrant_key. The disk is never written: the guest runs on a qcow2
# overlay in the state folder (default ${TMPDIR:-/tmp}/tfhost-vm), which also
# holds qemu.pid, console.log (the serial console), qmp.sock and the settings
# `wait-ssh`, `ssh` and `stop` read.
#
# --accel auto uses KVM when the host has hardware virtualization (kvm_intel or
# kvm_amd loaded) and TCG (software emulation) otherwise. A /dev/kvm backed only
# by kvm_pvm (a nested "PVM" hypervisor) counts as no KVM: it runs a stock Debian
# kernel so slowly that the box did not finish booting in 13 minutes, while TCG
# boots it in about 35 seconds. --cpu defaults to `host` (all CPU features passed
# through, as on the GPU hypervisor) under KVM and `max` under TCG.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
die() { echo "vm.sh: $*" >&2; exit 1; }
note() { echo "vm.sh: $*" >&2; }

command_name=${1:-}
[[ -n $command_name ]] || die "usage: $0 start|wait-ssh|ssh|stop [options]; see the header of $0"
shift

state=${TMPDIR:-/tmp}/tfhost-vm
disk="" key="" ssh_port="" memory=2048 cpus=2 accel=auto cpu="" iommu=false timeout=""
qemu_extra=()
remote=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --state) state=${2:?}; shift 2 ;;
    --disk) disk=${2:?}; shift 2 ;;
    --key) key=${2:?}; shift 2 ;;
    --ssh-port) ssh_port=${2:?}; shift 2 ;;
    --memory) memory=${2:?}; shift 2 ;;
    --cpus) cpus=${2:?}; shift 2 ;;
    --accel) accel=${2:?}; shift 2 ;;
    --cpu) cpu=${2:?}; shift 2 ;;
    --iommu) iommu=true; shift ;;
    --qemu-arg) qemu_extra+=("${2:?}"); shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --) shift; remote=("$@"); break ;;
    *) die "unknown option $1 for $command_name; see the header of $0" ;;
  esac
done

pid_alive() { [[ -f $state/qemu.pid ]] && kill -0 "$(cat "$state/qemu.pid")" 2>/dev/null; }

load_settings() {
  [[ -f $state/settings ]] || die "no VM state in $state; start one: $0 start --state $state"
  # shellcheck source=/dev/null
  source "$state/settings"
}

ssh_command() {
  # The host key changes with every new overlay, so it is neither checked nor remembered.
  # Keepalives end a session whose guest rebooted (QEMU's hostfwd never closes it).
  printf '%s\0' ssh -i "$key" -p "$ssh_port" -o BatchMode=yes -o IdentitiesOnly=yes \
    -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR \
    -o ConnectTimeout=5 -o ServerAliveInterval=5 -o ServerAliveCountMax=6 vagrant@127.0.0.1
}

choose_accel() {
  case $accel in
    kvm)
      [[ -r /dev/kvm && -w /dev/kvm ]] || die "--accel kvm but /dev/kvm is missing or not usable; use --accel tcg"
      echo kvm ;;
    tcg) echo tcg ;;
    auto)
      if [[ -r /dev/kvm && -w /dev/kvm ]] && [[ -d /sys/module/kvm_intel || -d /sys/module/kvm_amd ]]; then
        echo kvm
      else
        if [[ -d /sys/module/kvm_pvm ]]; then
          note "/dev/kvm is kvm_pvm (nested PVM), too slow for a stock kernel: using TCG"
        else
          note "no hardware KVM (kvm_intel/kvm_amd) here: using TCG software emulation"
        fi
        echo tcg
      fi ;;
    *) die "--accel must be auto, kvm or tcg, got '$accel'" ;;
  esac
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found; install it: apt-get install -y qemu-system-x86"
  command -v qemu-img >/dev/null || die "qemu-img not found; install it: apt-get install -y qemu-utils"
  [[ $memory =~ ^[0-9]+$ && $memory -ge 512 ]] || die "--memory must be MiB >= 512, got '$memory'"
  [[ $cpus =~ ^[0-9]+$ && $cpus -ge 1 ]] || die "--cpus must be a positive integer, got '$cpus'"
  [[ -z $ssh_port || $ssh_port =~ ^[0-9]+$ ]] || die "--ssh-port must be a port number, got '$ssh_port'"
  case $accel in auto|kvm|tcg) ;; *) die "--accel must be auto, kvm or tcg, got '$accel'" ;; esac
  pid_alive && die "a VM from $state is still running (pid $(cat "$state/qemu.pid")); stop it first: $0 stop --state $state"
  if [[ -z $disk ]]; then
    local box
    box=$("$here/build-box.sh")
    disk=$box/disk.qcow2
    [[ -n $key ]] || key=$box/vagrant_key
  fi
  [[ -f $disk ]] || die "disk $disk does not exist; build one: scripts/build-box.sh"
  [[ -n $key && -f $key ]] || die "no SSH key for user vagrant; pass --key (the box's vagrant_key)"
  [[ -n $ssh_port ]] || ssh_port=$(free_port)

  local chosen
  chosen=$(choose_accel)
  if [[ -z $cpu && $chosen == kvm ]]; then cpu=host; elif [[ -z $cpu ]]; then cpu=max; fi

  rm -rf "$state"
  mkdir -p "$state"
  disk=$(realpath "$disk")
  key=$(realpath "$key")
  qemu-img create -q -f qcow2 -b "$disk" -F qcow2 "$state/overlay.qcow2"

  local args=(
    -name tfhost-vm -machine q35 -cpu "$cpu" -smp "$cpus" -m "$memory"
    -display none -vga none -monitor none -serial "file:$state/console.log"
    -qmp "unix:$state/qmp.sock,server=on,wait=off"
    -pidfile "$state/qemu.pid" -daemonize
  )
  if [[ $chosen == kvm ]]; then args+=(-accel kvm); else args+=(-accel 'tcg,thread=multi'); fi
  # QEMU wants the IOMMU before any PCI device it translates for.
  [[ $iommu == true ]] && args+=(-device 'intel-iommu,intremap=off')
  args+=(
    -drive "file=$state/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe,discard=unmap"
    -netdev "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:$ssh_port-:22"
    -device 'virtio-net-pci,netdev=net0'
    -device virtio-rng-pci
    "${qemu_extra[@]}"
  )
  {
    printf 'key=%q\nssh_port=%q\naccel=%q\ncpu=%q\ndisk=%q\n' "$key" "$ssh_port" "$chosen" "$cpu" "$disk"
  } >"$state/settings"
  printf '%q ' qemu-system-x86_64 "${args[@]}" >"$state/qemu.cmdline"
  if ! qemu-system-x86_64 "${args[@]}" 2>"$state/qemu.err"; then
    cat "$state/qemu.err" >&2
    die "QEMU did not start (see above); if port $ssh_port is taken, pass another --ssh-port"
  fi
  note "booting $disk ($chosen, cpu $cpu, $cpus vCPUs, $memory MiB); ssh on 127.0.0.1:$ssh_port"
  echo "ssh_port=$ssh_port accel=$chosen state=$state"
}

wait_ssh() {
  load_settings
  local limit=${timeout:-300} started=$SECONDS cmd=()
  mapfile -d '' cmd < <(ssh_command)
  while (( SECONDS - started < limit )); do
    pid_alive || die "QEMU exited while booting; see $state/console.log and $state/qemu.err"
    if "${cmd[@]}" true 2>/dev/null; then
      note "ssh answered after $(( SECONDS - started )) s"
      return 0
    fi
    sleep 2
  done
  tail -5 "$state/console.log" >&2 || true
  die "no SSH on 127.0.0.1:$ssh_port within $limit s; the console is in $state/console.log"
}

run_ssh() {
  load_settings
  local cmd=()
  mapfile -d '' cmd < <(ssh_command)
  exec "${cmd[@]}" "${remote[@]}"
}

qmp() {
  # One QMP command over the monitor socket: handshake, command, done.
  python3 - "$state/qmp.sock" "$1" <<'EOF'
import json, socket, sys
sock = socket.socket(socket.AF_UNIX)
sock.settimeout(5)
sock.connect(sys.argv[1])
stream = sock.makefile("rw")
stream.readline()
for command in ("qmp_capabilities", sys.argv[2]):
    stream.write(json.dumps({"execute": command}) + "\n")
    stream.flush()
    stream.readline()
EOF
}

stop() {
  [[ -d $state ]] || { note "nothing to stop in $state"; return 0; }
  pid_alive || { note "the VM in $state is not running"; return 0; }
  local pid limit=${timeout:-60} started=$SECONDS
  pid=$(cat "$state/qemu.pid")
  # ACPI power button first (clean shutdown), then QMP quit, then signals.
  qmp system_powerdown 2>/dev/null || true
  while (( SECONDS - started < limit )) && kill -0 "$pid" 2>/dev/null; do sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then
    note "guest did not power off within $limit s; quitting QEMU"
    qmp quit 2>/dev/null || kill "$pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  note "stopped (pid $pid)"
}

case $command_name in
  start) start ;;
  wait-ssh) wait_ssh ;;
  ssh) run_ssh ;;
  stop) stop ;;
  *) die "unknown command '$command_name'; use start, wait-ssh, ssh or stop" ;;
esac
