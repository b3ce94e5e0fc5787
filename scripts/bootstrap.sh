#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv.
#
#   scripts/bootstrap.sh cpu        # runtime on the CPU: tensorflow-cpu
#   scripts/bootstrap.sh cpu,dev    # plus every test and lint tool
#   scripts/bootstrap.sh gpu        # tensorflow[and-cuda] for a GPU host without containers
#
# Works as root on a fresh Debian 12 / Ubuntu 24.04: installs python3-venv with apt
# when the interpreter cannot create virtual environments. Python >= 3.11 is required
# (TensorFlow and this package); on Ubuntu 22.04 install python3.11 first.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=${1:-cpu}
die() { echo "bootstrap: $*" >&2; exit 1; }

python=""
for candidate in python3.13 python3.12 python3.11 python3; do
  if command -v "$candidate" >/dev/null &&
     "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    python=$candidate; break
  fi
done
[[ -n $python ]] || die "Python >= 3.11 not found; install it (apt-get install -y python3.11 python3.11-venv)"

if [[ ! -x .venv/bin/python ]]; then
  if ! "$python" -m venv --help >/dev/null 2>&1 || ! "$python" -c 'import ensurepip' 2>/dev/null; then
    [[ $(id -u) -eq 0 ]] || die "$python cannot create virtual environments; run as root or install python3-venv"
    version=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$version-venv" python3-venv >/dev/null
  fi
  "$python" -m venv .venv
fi
# pip itself first, at the locked version and hash (requirements/pip.txt): the pip that
# then checks every other hash is not taken from the index unchecked.
.venv/bin/python -m pip install -q --require-hashes --no-deps -r requirements/pip.txt \
  || die "installing requirements/pip.txt failed (a hash mismatch means a file differs from the locked one)"
# The runtime set, exactly as locked, every file checked against its hash
# (requirements/*.txt, from scripts/lock-deps.sh; the images install the same files).
# It holds the build requirements too (setuptools, wheel), so the package itself is built
# with those (--no-build-isolation) instead of copies fetched unchecked for the build.
# The dev tools are not hash-locked: docs/security.md, "Locked, with hashes", says why.
case ",$extras," in
  *,gpu,*) lock=requirements/gpu.txt ;;
  *) lock=requirements/cpu.txt ;;
esac
.venv/bin/python -m pip install -q --require-hashes --no-deps -r "$lock" \
  || die "installing $lock failed (a hash mismatch means a file differs from the locked one)"
.venv/bin/python -m pip install -q --no-build-isolation -e ".[$extras]"
