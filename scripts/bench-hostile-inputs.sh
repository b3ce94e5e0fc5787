#!/usr/bin/env bash
# The hostile-input families (tests/security) with their budgets and the measured worst case per
# family printed: each case is the real CLI in a child process under RLIMIT_AS. The figures in
# docs/benchmarks.md come from this command; the same families run in the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHONPATH=$PWD exec .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/security/ "$@"
