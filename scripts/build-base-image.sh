#!/usr/bin/env bash
# Build a Debian base image from Debian's mirror with debootstrap + docker import.
#
# Why: no registry (Docker Hub, NGC) is reachable from CI, but Debian's mirror is.
# The image is tagged with a hash of this script and its arguments, so it is built
# once per machine and reused until the recipe changes.
#
#   scripts/build-base-image.sh TAG [--suite bookworm] [--mirror URL] [--include pkg1,pkg2]
#                               [--keyring FILE]
#
# The mirror's Release file must carry a valid signature by a key in Debian's archive
# keyring (debian-archive-keyring; another with --keyring or $DEBIAN_KEYRING): debootstrap
# gets the keyring explicitly, because without one it warns and goes on unverified.
# Prints the tag on success. Needs root, debootstrap and a running engine (DOCKER_HOST).
set -euo pipefail

die() { echo "build-base-image: $*" >&2; exit 1; }

[[ $# -ge 1 ]] || die "usage: $0 TAG [--suite S] [--mirror URL] [--include pkgs] [--keyring FILE]"
tag=$1; shift
suite=bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
include=""
keyring=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
while [[ $# -gt 0 ]]; do
  case $1 in
    --suite) suite=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --include) include=$2; shift 2 ;;
    --keyring) keyring=$2; shift 2 ;;
    *) die "unknown option $1" ;;
  esac
done

[[ $(id -u) -eq 0 ]] || die "debootstrap needs root; run as root"
command -v debootstrap >/dev/null || die "debootstrap not found; install it: apt-get install -y debootstrap"
command -v gpgv >/dev/null || die "gpgv not found (debootstrap needs it to check the mirror's signature); install it: apt-get install -y gpgv"
[[ -s $keyring ]] || die "Debian archive keyring $keyring not found; install it (apt-get install -y debian-archive-keyring) or pass --keyring FILE"
docker version >/dev/null 2>&1 || die "no Docker engine answers at DOCKER_HOST=${DOCKER_HOST:-default}; start one: eval \"\$(scripts/docker-engine.sh start)\""

recipe=$(printf '%s\n' "$suite" "$mirror" "$include" | cat - "$0" "$keyring" | sha256sum | cut -c1-12)
full="$tag:$recipe"
# One build per recipe at a time: a second caller (another test thread, another shell)
# waits here and then finds the image, instead of running debootstrap a second time.
mkdir -p /run/lock  # a tmpfs: the lock files go with the next boot
exec 9>"/run/lock/tfhost-base-image.${full//[^A-Za-z0-9._-]/_}.lock"
flock 9
if docker image inspect "$full" >/dev/null 2>&1; then
  docker tag "$full" "$tag:latest"
  echo "$full"
  exit 0
fi

work=$(mktemp -d /var/tmp/base-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
args=(--variant=minbase "--components=main" "--keyring=$keyring")
[[ -n $include ]] && args+=("--include=$include")
debootstrap "${args[@]}" "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
  || { grep -q -E "unknown key|Invalid Release signature|BADSIG|NO_PUBKEY" "$work/debootstrap.log" \
         && die "the Release file of $suite from $mirror is not signed by a key in $keyring; use a trusted mirror, or the keyring that signs it (--keyring FILE)"
       tail -20 "$work/debootstrap.log" >&2; die "debootstrap of $suite from $mirror failed"; }
# Keep images small and apt usable inside them.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
echo "deb $mirror $suite main" >"$work/rootfs/etc/apt/sources.list"
tar -C "$work/rootfs" -c . | docker import - "$full" >/dev/null
docker tag "$full" "$tag:latest"
echo "$full"
