"""Device discovery and set-up for TensorFlow, done before anything allocates memory.

TensorFlow maps all memory of every visible GPU the first time it touches one
(the seed-000 problem: one process per GPU still grabbed all four). Memory growth
must be set before the first op, so every command calls :func:`setup_tensorflow`
first thing after importing TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from workloads.errors import WorkloadError

MIN_COMPUTE_CAPABILITY = (5, 2)


@dataclass(frozen=True)
class Gpu:
    """One visible GPU as TensorFlow sees it."""

    index: int
    name: str
    compute_capability: tuple[int, int] | None
    tf_name: str  # e.g. /physical_device:GPU:0
    memory_total_bytes: int | None = None

    @property
    def capability_text(self) -> str:
        cc = self.compute_capability
        return f"{cc[0]}.{cc[1]}" if cc else "unknown"


def setup_tensorflow(tf: Any, *, cpu_replicas: int = 1) -> list[Gpu]:
    """Enable memory growth on every GPU and optionally split the CPU; return the GPUs.

    ``cpu_replicas > 1`` splits the host CPU into that many logical devices, so the
    multi-replica code path (MirroredStrategy, scaling studies) runs on a machine
    without GPUs. Must run before TensorFlow initialises its devices.
    """
    physical = tf.config.list_physical_devices("GPU")
    try:
        for device in physical:
            tf.config.experimental.set_memory_growth(device, True)
        if cpu_replicas > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(cpu_replicas)]
            )
    except RuntimeError as exc:  # devices already initialised by an earlier call
        raise WorkloadError(
            f"TensorFlow devices were initialised too early ({exc})",
            "set up devices before creating any tensor",
        ) from exc
    from workloads.envinfo import nvml_gpus

    _, nvml = nvml_gpus()
    memory = {g["index"]: g["memory_total_bytes"] for g in nvml}
    gpus = []
    for index, device in enumerate(physical):
        details = tf.config.experimental.get_device_details(device)
        cc = details.get("compute_capability")
        gpus.append(
            Gpu(
                index=index,
                name=str(details.get("device_name", device.name)),
                compute_capability=tuple(cc) if cc else None,
                tf_name=device.name,
                memory_total_bytes=memory.get(index) if len(nvml) == len(physical) else None,
            )
        )
    return gpus


def too_old(gpus: list[Gpu]) -> list[Gpu]:
    """GPUs below compute capability 5.2, which current TensorFlow builds do not support."""
    return [
        g for g in gpus if g.compute_capability and g.compute_capability < MIN_COMPUTE_CAPABILITY
    ]


def require_supported(gpus: list[Gpu]) -> None:
    """Raise naming every GPU below compute capability 5.2."""
    old = too_old(gpus)
    if old:
        names = ", ".join(
            f"GPU {g.index} {g.name} (compute capability {g.capability_text})" for g in old
        )
        raise WorkloadError(
            f"{names} below the minimum compute capability 5.2 of TensorFlow's CUDA builds",
            "use a newer GPU or hide this one with CUDA_VISIBLE_DEVICES",
        )
