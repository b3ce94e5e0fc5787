"""``workloads health``: the quick, no-benchmark node health check SLURM runs on every node.

command (the CLI), check (one run: the readings and the acceptance rules that judge them),
state (the kernel-log cursor and the failures still open, between runs), slurm (drain
and resume through scontrol). The rules are those of ``workloads accept``.
"""
