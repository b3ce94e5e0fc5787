#!/usr/bin/env bash
# README command 2: the whole test suite, exactly as CI runs it (.ci/run calls this).
#
# Installs what it needs (Debian packages, .venv with the cpu and dev extras), then runs
# pytest over tests/: the linters (ruff, mypy, shellcheck, ansible-lint, yamllint,
# hadolint) are tests too, in tests/test_lint.py. Extra arguments go to pytest, e.g.
#   scripts/test.sh -k cifar10        scripts/test.sh -m "not slow"
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
scripts/bootstrap.sh cpu,dev
exec .venv/bin/python -m pytest "$@"
