#!/usr/bin/env bash
# Install the Debian packages the test suite drives for real (only those missing).
#
# Why each: docker.io (the private test engine), debootstrap (base images and the VM box),
# the shell linter, chromium (the sweep's HTML explorer test), gnupg/apt-utils/dpkg-dev
# (signed stub apt repositories), slurm-wlm/munge (local SLURM cluster), qemu-system-x86 and
# qemu-utils (the VM tests boot the box), e2fsprogs/fdisk/openssh-client (scripts/build-box.sh
# writes the disk and the box's key), vagrant/vagrant-libvirt (`vagrant validate` of the Vagrantfile),
# libvirt-daemon-system/libvirt-clients/dnsmasq-base/iptables (`vagrant up` in a test's own network
# namespace: libvirtd, its management network's DHCP and NAT rules; tests/vm/test_vagrant_up.py).
# debian-archive-keyring/gpgv (debootstrap checks the mirror's signature against them).
# rpm/createrepo-c/dnf (signed stub rpm repositories for the Rocky 9 stand-in: rpmbuild,
# rpmsign, createrepo_c, modifyrepo_c; dnf checks them in tests/fixtures/test_rpmrepo.py).
# pci.ids/curl: the PCI ID repository, which the datasheet table's coverage test reads
# (tests/workloads/test_accept_reference.py); a newer Debian build of it than bookworm's
# is installed below.
set -euo pipefail

packages=(
  python3-venv docker.io debootstrap shellcheck chromium gnupg apt-utils dpkg-dev
  ca-certificates iproute2 slurm-wlm munge
  qemu-system-x86 qemu-utils e2fsprogs fdisk openssh-client vagrant vagrant-libvirt
  libvirt-daemon-system libvirt-clients dnsmasq-base iptables
  debian-archive-keyring gpgv
  rpm createrepo-c dnf
  pci.ids curl
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

# The vagrant test runs its own libvirtd inside a network namespace. A libvirt
# installed just now must not put its default 192.168.122.0/24 bridge on this
# machine's network when the host's libvirtd starts (at boot, or on first use).
if [[ " ${missing[*]} " == *" libvirt-daemon-system "* ]]; then
  rm -f /etc/libvirt/qemu/networks/autostart/default.xml
fi

# The PCI ID repository of bookworm (2023-04) predates the H200 and the B200: install a
# newer Debian build of the same package (architecture all, no dependencies), pinned by
# version and SHA-256, from Debian's pool; sid's first, then trixie's, which stays in the
# pool for as long as trixie is supported. The coverage test says which file it read.
pci_ids_builds=(
  "0.0~2026.10.24-1 fe7c180612757179c22936a32934e527dd66fcf65249a004558f66d6d9e6b41c"
  "0.0~2025.06.09-1 132bc7520473e53939e277cbf4512261b8d73ae244d77c277f674ecaf174598c"
)
installed=$(dpkg-query -W -f='${Version}' pci.ids 2>/dev/null || true)
for build in "${pci_ids_builds[@]}"; do
  read -r version sha256 <<<"$build"
  dpkg --compare-versions "${installed:-0}" lt "$version" || break
  [[ $(id -u) -eq 0 ]] || { echo "install-test-deps: run as root to install pci.ids $version" >&2; exit 1; }
  deb=$(mktemp -d)/pci.ids_${version}_all.deb
  if curl -fsSL --retry 3 -o "$deb" \
       "http://deb.debian.org/debian/pool/main/p/pci.ids/pci.ids_${version}_all.deb" \
     && echo "$sha256  $deb" | sha256sum -c --quiet; then
    dpkg -i "$deb" >/dev/null
    rm -rf "$(dirname "$deb")"
    break
  fi
  rm -rf "$(dirname "$deb")"
  echo "install-test-deps: pci.ids $version is not in Debian's pool (or its checksum differs); trying the next" >&2
done
