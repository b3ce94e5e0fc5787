"""Which measurement layer runs the battery: TensorFlow's or JAX's, chosen by ``KERAS_BACKEND``.

Kept apart from the interface (:mod:`workloads.accept.kernels`), which the backend layers
import: the factory imports the layers, so in one module the two would import each other.
"""

from __future__ import annotations

import os

from workloads.accept.kernels import Kernels
from workloads.errors import WorkloadError


def load_kernels(backend: str, cpu_devices: int) -> Kernels:
    """The layer for ``backend``; ``cpu_devices`` logical CPU devices when there is no GPU."""
    if backend == "tensorflow":
        from workloads.accept.kernels_tf import TensorFlowKernels

        return TensorFlowKernels(cpu_devices)
    if backend == "jax":
        from workloads.accept.kernels_jax import JaxKernels

        return JaxKernels()
    raise WorkloadError(
        f"`workloads accept` measures with TensorFlow or JAX, not KERAS_BACKEND={backend}",
        "unset KERAS_BACKEND (TensorFlow) or set KERAS_BACKEND=jax",
    )


def prepare_jax_cpu_devices(count: int, environ: dict[str, str] | None = None) -> None:
    """Ask XLA for ``count`` host devices (before JAX starts), so the all-reduce has ranks.

    Only on hosts where JAX will find no accelerator does this matter, and it costs
    nothing elsewhere: the flag only splits the host platform.
    """
    env = os.environ if environ is None else environ
    flag = "--xla_force_host_platform_device_count"
    flags = env.get("XLA_FLAGS", "")
    if flag not in flags:
        env["XLA_FLAGS"] = f"{flags} {flag}={count}".strip()
