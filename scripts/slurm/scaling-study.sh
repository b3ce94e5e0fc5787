#!/usr/bin/env bash
# Submit the GPU scaling study: 1, 2 and 4 GPUs on one node, then 2 nodes x 4 GPUs.
# Each job writes its record to results/; afterwards: workloads report results/
#   scripts/slurm/scaling-study.sh [--partition gpu] [other sbatch options]
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p results
for gpus in 1 2 4; do
  sbatch --parsable "$@" --gres="gpu:$gpus" --job-name="cifar10-${gpus}gpu" scripts/slurm/cifar10-1node.sbatch
done
sbatch --parsable "$@" --nodes=2 --ntasks-per-node=4 --gres=gpu:4 scripts/slurm/cifar10-multinode.sbatch
