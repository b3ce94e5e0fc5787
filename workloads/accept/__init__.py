"""``workloads accept``: measured figures against the hardware's own limits, with verdicts.

kernels (the interface the measurements are written against), backends (which
layer: kernels_tf or kernels_jax), checks, verdicts (pure rules), dcgm, battery (the
runner), p2p (the GPU-pair matrix), soak (checked products under load), errors (XIDs,
link error counters, AER), output (table and record), command (the CLI); health is the
quick, no-benchmark part (``workloads health``, SLURM's node health check). The datasheet
table, the readers of NVML, the kernel log and sysfs are a layer below,
:mod:`workloads.hardware`.
"""
