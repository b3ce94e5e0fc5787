"""Host-side subcommands of the ``workloads`` CLI: ``run``, ``scale`` and ``monitor``.

Each module exposes ``register(subparsers)`` like the in-image commands, and
imports nothing heavy (docker, matplotlib, NVML) until its command runs.
"""
