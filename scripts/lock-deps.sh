#!/usr/bin/env bash
# Regenerate the hash-locked sets in requirements/:
#   cpu.txt, gpu.txt  the runtime set (pyproject's dependencies, the build requirements and
#                     tensorflow-cpu or tensorflow[and-cuda]): the cpu and pip images, CI's .venv
#   ngc.txt           the same without TensorFlow: what the ngc image adds around NGC's base,
#                     pinned where it overlaps cpu.txt at cpu.txt's versions
#   pip.txt           pip itself, which scripts/bootstrap.sh upgrades the venv's to
#
# Why: the images and CI install from these files with `pip install --require-hashes`, so
# a re-uploaded or substituted wheel is refused and every build gets the same versions.
# uv compiles them (fast, and one --universal lock serves Python 3.11 and 3.12, Linux
# and other platforms); pip alone installs them. Run after editing pyproject.toml;
# tests/images/test_lock.py fails until the locks satisfy it again.
#
#   scripts/lock-deps.sh            # needs uv (from PyPI, with pip) and PyPI
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "lock-deps: $*" >&2; exit 1; }
uv=${UV:-uv}
command -v "$uv" >/dev/null || die "uv not found; install uv with pip, or set UV=/path/to/uv"

compile() {  # compile OUTPUT: requirements on stdin -> requirements/OUTPUT, every file hashed
  "$uv" pip compile - --universal --python-version 3.11 --generate-hashes \
    --index-url https://pypi.org/simple --no-annotate --quiet \
    --custom-compile-command "scripts/lock-deps.sh" -o "requirements/$1" \
    || die "uv could not resolve requirements/$1; see the message above"
}

for extra in cpu gpu; do
  python3 images/lib/project-deps pyproject.toml --extra "$extra" | compile "$extra.txt"
done
# uv keeps the versions an existing output file pins: starting ngc.txt from cpu.txt gives
# the ngc image the cpu image's versions wherever both install a package.
cp requirements/cpu.txt requirements/ngc.txt
python3 images/lib/project-deps pyproject.toml | compile ngc.txt
echo pip | compile pip.txt
