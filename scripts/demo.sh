#!/usr/bin/env bash
# README command 1: set up .venv and run the CIFAR-10 benchmark on the CPU, small and real.
#
# Uses the real CIFAR-10 archive when it is cached (~/.cache/workloads) or downloadable,
# synthetic data otherwise; prints the progress lines and a results table, and writes the
# record to results/demo-cnn.json (plus results/records.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh cpu
exec .venv/bin/workloads cifar10 --model cnn --data auto --epochs 2 --steps-per-epoch 30 \
  --batch-size 64 --log-every 10 --output results/demo-cnn.json "$@"
