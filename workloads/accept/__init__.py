"""``workloads accept``: measured figures against the hardware's own limits, with verdicts.

kernels (the interface the measurements are written against), backends (which
layer: kernels_tf or kernels_jax), checks, verdicts (pure rules), dcgm, battery (the
runner), output (table and record), command (the CLI). The datasheet table and the
NVML readings are a layer below, :mod:`workloads.hardware`.
"""
