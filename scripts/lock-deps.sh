#!/usr/bin/env bash
# Regenerate the hash-locked runtime sets: requirements/cpu.txt and requirements/gpu.txt.
#
# Why: the images and CI install the runtime set (pyproject's dependencies, the build
# requirements and TensorFlow) from these files with `pip install --require-hashes`, so
# a re-uploaded or substituted wheel is refused and every build gets the same versions.
# uv compiles them (fast, and one --universal lock serves Python 3.11 and 3.12, Linux
# and other platforms); pip alone installs them. Run after editing pyproject.toml;
# tests/images/test_lock.py fails until the lock satisfies it again.
#
#   scripts/lock-deps.sh            # needs uv (pip install uv) and PyPI
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "lock-deps: $*" >&2; exit 1; }
uv=${UV:-uv}
command -v "$uv" >/dev/null || die "uv not found; install it: pip install uv (or set UV=/path/to/uv)"

for extra in cpu gpu; do
  python3 images/lib/project-deps pyproject.toml --extra "$extra" \
    | "$uv" pip compile - --universal --python-version 3.11 --generate-hashes \
        --index-url https://pypi.org/simple --no-annotate --quiet \
        --custom-compile-command "scripts/lock-deps.sh" -o "requirements/$extra.txt" \
    || die "uv could not resolve the $extra set; see the message above"
done
