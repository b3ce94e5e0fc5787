#!/usr/bin/env bash
# Build a small Debian 12 Vagrant box (libvirt provider) offline from Debian's mirror.
#
# Why: no box registry is reachable from CI, but Debian's mirror is. The box is
# what `vagrant up` boots on a real hypervisor and what tests/vm boots with QEMU.
#
#   scripts/build-box.sh [--suite bookworm] [--mirror URL] [--size 12G]
#                        [--cache DIR] [--include pkg1,pkg2] [--keyring FILE]
#
# The mirror's Release file must be signed by a key in Debian's archive keyring
# (debian-archive-keyring; another with --keyring or $DEBIAN_KEYRING): debootstrap
# gets the keyring explicitly, because without one it warns and goes on unverified.
#
# Steps: debootstrap (two stages, services kept from starting) into a folder,
# configure it (vagrant user + generated SSH key, DHCP via systemd-networkd,
# serial console, first-boot SSH host keys), write the folder into an ext4
# filesystem inside a partitioned raw disk with `mke2fs -d` (no loop device or
# mount needed, so it also works in containers), install GRUB's BIOS boot code
# by hand (boot.img in the MBR, core.img right after it), convert to qcow2 and
# package a vagrant-libvirt .box (metadata.json + box.img + Vagrantfile).
#
# The result lands in CACHE/<recipe hash>/ and the script prints that folder.
# The hash covers this script and its arguments, so a machine builds a box once
# and reuses it until the recipe changes. Folder contents:
#   disk.qcow2          the boot disk (the .box's box.img)
#   vagrant_key(.pub)   the key authorized for user vagrant (mode 0600)
#   tfhost-debian12.box vagrant-libvirt box: `vagrant box add --name NAME FILE`
#   manifest.json       recipe, kernel version, sizes
#   build.log           debootstrap and chroot output
# Needs root, debootstrap, qemu-utils (qemu-img), e2fsprogs, fdisk (sfdisk),
# openssh-client (ssh-keygen).
set -euo pipefail

die() { echo "build-box: $*" >&2; exit 1; }

suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
size=12G
cache=${TFHOST_BOX_CACHE:-/var/cache/tfhost-box}
extra=""
keyring=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
while [[ $# -gt 0 ]]; do
  case $1 in
    --suite) suite=${2:?}; shift 2 ;;
    --mirror) mirror=${2:?}; shift 2 ;;
    --size) size=${2:?}; shift 2 ;;
    --cache) cache=${2:?}; shift 2 ;;
    --include) extra=${2:?}; shift 2 ;;
    --keyring) keyring=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option $1; see $0 --help" ;;
  esac
done

[[ $size =~ ^[0-9]+G$ ]] || die "--size must be whole GiB like 12G, got '$size'"
(( ${size%G} >= 4 )) || die "--size $size is too small for the provisioned host; use 4G or more"
[[ $(id -u) -eq 0 ]] || die "debootstrap and chroot need root; run as root"
for tool in debootstrap:debootstrap qemu-img:qemu-utils mke2fs:e2fsprogs sfdisk:fdisk \
            ssh-keygen:openssh-client gpgv:gpgv; do
  command -v "${tool%%:*}" >/dev/null \
    || die "${tool%%:*} not found; install it: apt-get install -y ${tool#*:}"
done

[[ -s $keyring ]] || die "Debian archive keyring $keyring not found; install it (apt-get install -y debian-archive-keyring) or pass --keyring FILE"

# What every box has: an init, a kernel sized for VMs, a bootloader, what Ansible
# needs on the managed side (python3, python3-apt, sudo, ssh), and lspci, which
# the GPU roles use to find (or not find) NVIDIA devices.
packages=systemd-sysv,udev,dbus,kmod,iproute2,procps,linux-image-cloud-amd64,grub-pc
packages+=,openssh-server,python3,python3-apt,sudo,ca-certificates,gnupg,curl,pciutils
[[ -n $extra ]] && packages+=",$extra"

recipe=$(printf '%s\n' "$suite" "$mirror" "$size" "$packages" | cat - "$0" | sha256sum | cut -c1-12)
out="$cache/$recipe"
if [[ -f $out/manifest.json ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$cache"
work=$(mktemp -d "$cache/.build-$recipe.XXXXXX")
root="$work/rootfs"
log="$work/build.log"

# Unmount whatever a failed step left mounted inside the build folder before
# deleting it: rm -rf through a bind mount of /dev or /proc would hit the host.
cleanup() {
  local target
  while read -r target; do
    umount -l "$target" 2>/dev/null || true
  done < <(awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r)
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

step() { echo "build-box: $*" >&2; }
fail_with_log() { tail -25 "$log" >&2; die "$1 (full log: rerun and see $log)"; }
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }

step "debootstrap $suite from $mirror (first stage)"
debootstrap --foreign --variant=minbase --components=main --include="$packages" \
  --keyring="$keyring" \
  "$suite" "$root" "$mirror" >>"$log" 2>&1 || fail_with_log "debootstrap of $suite from $mirror failed"

# A chroot has no init: keep package scripts from starting sshd & co on the host.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# grub-pc asks where to install itself; the answer is the guest's first virtio disk.
mkdir -p "$root/var/cache/debconf"
step "debootstrap second stage (unpacks and configures $(tr ',' '\n' <<<"$packages" | wc -l) packages)"
in_root /debootstrap/debootstrap --second-stage >>"$log" 2>&1 \
  || fail_with_log "debootstrap second stage failed"
echo "grub-pc grub-pc/install_devices multiselect /dev/vda" | in_root debconf-set-selections

step "configure the guest"
uuid=$(cat /proc/sys/kernel/random/uuid)
kernel=$(basename "$(find "$root/boot" -name 'vmlinuz-*' | sort -V | tail -1)")
[[ $kernel == vmlinuz-* ]] || die "no kernel in $root/boot; did linux-image-cloud-amd64 install?"
version=${kernel#vmlinuz-}
[[ -f $root/boot/initrd.img-$version ]] || die "no initramfs for $version in the image"

echo tfhost-vm >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\ttfhost-vm\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
  >"$root/etc/hosts"
echo "UUID=$uuid / ext4 errors=remount-ro 0 1" >"$root/etc/fstab"
base=${mirror%/}
{
  echo "deb $base $suite main"
  echo "deb $base $suite-updates main"
  [[ $base == */debian ]] && echo "deb ${base}-security $suite-security main"
} >"$root/etc/apt/sources.list"
# Each VM made from the box gets its own machine id at first boot.
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id"

cat >"$root/etc/systemd/network/10-dhcp.network" <<'EOF'
# Any wired interface: DHCP (QEMU user networking or libvirt's management network).
[Match]
Name=en* eth*

[Network]
DHCP=ipv4
EOF
in_root systemctl enable systemd-networkd.service >>"$log" 2>&1

# SSH host keys are made at first boot, so two VMs from one box never share them.
rm -f "$root"/etc/ssh/ssh_host_*
cat >"$root/etc/systemd/system/ssh-hostkeys.service" <<'EOF'
[Unit]
Description=Generate SSH host keys on first boot
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
RequiredBy=ssh.service
EOF
in_root systemctl enable ssh-hostkeys.service >>"$log" 2>&1
cat >"$root/etc/ssh/sshd_config.d/10-box.conf" <<'EOF'
# Key-only logins; no reverse DNS lookups (the VM has no resolver it may use).
PasswordAuthentication no
UseDNS no
EOF

in_root useradd --create-home --shell /bin/bash --comment "Vagrant" vagrant
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' >"$root/etc/sudoers.d/vagrant"
chmod 0440 "$root/etc/sudoers.d/vagrant"
ssh-keygen -q -t ed25519 -N "" -C "vagrant@tfhost-box-$recipe" -f "$work/vagrant_key"
install -d -m 0700 "$root/home/vagrant/.ssh"
install -m 0600 "$work/vagrant_key.pub" "$root/home/vagrant/.ssh/authorized_keys"
in_root chown -R vagrant:vagrant /home/vagrant/.ssh

cat >"$root/etc/default/grub" <<'EOF'
# Written by scripts/build-box.sh: boot at once, kernel and GRUB on the serial console.
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200n8"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
EOF

# GRUB by hand: grub-install and grub-mkconfig probe block devices, which a
# folder being built has none of. core.img finds the root filesystem by UUID,
# so the disk may be attached under any name. The first `update-grub` inside a
# booted guest replaces this grub.cfg with a generated one from /etc/default/grub.
mkdir -p "$root/boot/grub"
cp -r "$root/usr/lib/grub/i386-pc" "$root/boot/grub/"
cat >"$work/early.cfg" <<EOF
search.fs_uuid $uuid root
set prefix=(\$root)/boot/grub
EOF
cat >"$root/boot/grub/grub.cfg" <<EOF
# Written by scripts/build-box.sh; update-grub in the guest regenerates it.
serial --speed=115200
terminal_input console serial
terminal_output console serial
set timeout=0
insmod part_msdos
insmod ext2
search --no-floppy --fs-uuid --set=root $uuid
menuentry 'Debian GNU/Linux' {
  linux /boot/vmlinuz-$version root=UUID=$uuid ro console=tty0 console=ttyS0,115200n8
  initrd /boot/initrd.img-$version
}
EOF
cp "$work/early.cfg" "$root/tmp/early.cfg"
in_root grub-mkimage -O i386-pc -o /tmp/core.img -c /tmp/early.cfg -p /boot/grub \
  biosdisk part_msdos ext2 search_fs_uuid >>"$log" 2>&1 || fail_with_log "grub-mkimage failed"
mv "$root/tmp/core.img" "$work/core.img"
rm -f "$root/tmp/early.cfg"
(( $(stat -c %s "$work/core.img") < 1024 * 1024 - 512 )) || die "GRUB core.img does not fit before the partition"

# The initramfs above was built in the chroot with every storage driver (MODULES=most).
# Rebuilds inside a guest (a new kernel, the NVIDIA or vfio roles) only need the
# modules of the VM's own hardware, and take a fraction of the time.
echo "MODULES=dep" >"$root/etc/initramfs-tools/conf.d/10-box-modules-dep.conf"

# Package installs in a guest under emulation (the driver with DKMS's compiler, the
# kernel headers: tens of thousands of files) spend much of their time in dpkg's fsync
# of each unpacked file, and in unpacking documentation nobody reads in a test guest.
# A box's guest is thrown away after its run, so it needs no crash safety: dpkg skips
# the syncs and the documentation, as Debian's and Ubuntu's container images do. The
# copyright files stay.
cat >"$root/etc/dpkg/dpkg.cfg.d/10-box-speedup" <<'CFG'
force-unsafe-io
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
CFG

in_root apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root/usr/sbin/policy-rc.d" "$root"/var/log/*.log \
  "$root/debootstrap" "$root/var/lib/apt/periodic/update-success-stamp"
# The lists are gone, so let them look ancient: tools that skip `apt-get update`
# while the cache is recent (Ansible's cache_valid_time) must update first.
touch -d @0 "$root/var/lib/apt/lists"

step "write the root filesystem into a $size disk"
raw="$work/disk.raw"
truncate -s "$size" "$raw"
printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk --quiet "$raw"
fs_blocks=$(( ($(stat -c %s "$raw") - 1048576) / 4096 ))
mke2fs -q -t ext4 -b 4096 -L tfhost-root -U "$uuid" -E offset=1048576 -d "$root" \
  "$raw" "$fs_blocks" >>"$log" 2>&1 || fail_with_log "mke2fs -d failed"
# MBR boot code (first 440 bytes keep the partition table intact), core.img at sector 1:
# grub-mkimage already wrote core.img's own length into its first sector's blocklist.
dd if="$root/usr/lib/grub/i386-pc/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$work/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none

step "convert to qcow2 and package the vagrant-libvirt box"
mkdir -p "$work/out"
qemu-img convert -O qcow2 "$raw" "$work/out/disk.qcow2"
rm -f "$raw"
mv "$work/vagrant_key" "$work/vagrant_key.pub" "$work/out/"
chmod 0600 "$work/out/vagrant_key"
cat >"$work/out/metadata.json" <<EOF
{"provider": "libvirt", "format": "qcow2", "virtual_size": ${size%G}}
EOF
cat >"$work/out/Vagrantfile" <<'EOF'
# Box defaults (scripts/build-box.sh): log in with the key built into this box.
Vagrant.configure("2") do |config|
  config.ssh.username = "vagrant"
  config.ssh.private_key_path = [File.expand_path("vagrant_key", __dir__)]
  config.vm.provider :libvirt do |libvirt|
    libvirt.driver = "kvm"
    libvirt.disk_bus = "virtio"
  end
end
EOF
tar -C "$work/out" -cf "$work/out/tfhost-debian12.box" --transform 's,^disk\.qcow2$,box.img,' \
  metadata.json Vagrantfile vagrant_key disk.qcow2
chmod 0600 "$work/out/tfhost-debian12.box"
cat >"$work/out/manifest.json" <<EOF
{
  "recipe": "$recipe",
  "suite": "$suite",
  "mirror": "$mirror",
  "kernel": "$version",
  "root_uuid": "$uuid",
  "virtual_size_gib": ${size%G},
  "disk_bytes": $(stat -c %s "$work/out/disk.qcow2"),
  "packages": "$packages",
  "built_at": "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
}
EOF
mv "$log" "$work/out/build.log"
rm -rf --one-file-system "$out"
mv "$work/out" "$out"
# Boxes of older recipes are ~1 GB each: drop those not rebuilt for a week.
find "$cache" -mindepth 1 -maxdepth 1 -type d -regextype posix-extended \
  -regex '.*/[0-9a-f]{12}' ! -name "$recipe" -mtime +7 -exec rm -rf --one-file-system {} +
echo "$out"
