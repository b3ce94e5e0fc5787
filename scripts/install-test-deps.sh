#!/usr/bin/env bash
# Install the Debian packages the test suite drives for real (only those missing).
#
# Why each: docker.io (the private test engine), debootstrap (base images and the VM box),
# the shell linter, chromium (the sweep's HTML explorer test), gnupg/apt-utils/dpkg-dev
# (signed stub apt repositories), qemu/ovmf tools (the VM test), slurm-wlm/munge (local
# SLURM cluster), vagrant/vagrant-libvirt (`vagrant validate`).
set -euo pipefail

packages=(
  python3-venv docker.io debootstrap shellcheck chromium gnupg apt-utils dpkg-dev
  ca-certificates iproute2 slurm-wlm munge
)
packages+=("$@")

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "install-test-deps: run as root to install: ${missing[*]}" >&2; exit 1; }
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
