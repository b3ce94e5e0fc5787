"""``workloads accept``: measured figures against the hardware's own limits, with verdicts.

reference (the datasheet table), nvml (readings), kernels (the per-backend
measurement layer), checks, verdicts (pure rules), dcgm, battery (the runner),
output (table and record), command (the CLI).
"""
