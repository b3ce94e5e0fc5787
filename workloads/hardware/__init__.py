"""What the hardware is and what it can do: the layer every check and workload stands on.

reference (the datasheet table, ``reference.yaml``), identify (framework devices to
NVML indices, PCI device IDs to the table), nvml (readings of each GPU, in NVML's own
names and units). Nothing here imports a check (``workloads.accept``) or a workload:
``accept``, ``roofline``, ``busy``, ``cifar10`` and ``style`` import from here.
"""
