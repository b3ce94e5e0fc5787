"""The ``env`` block of every record: which machine and software produced a figure.

A benchmark number without its host, GPU, driver and framework versions cannot
be compared with anything, so every record carries this block. GPU facts come
from NVML (``nvidia-ml-py``) when a driver is present; nothing here imports a
deep-learning framework that the run did not already import.
"""

from __future__ import annotations

import os
import platform
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any


@cache
def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (or the platform's best guess)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The CPU flags that give bfloat16 matmuls native speed; without them bfloat16 is
# emulated and slower than float32.
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_bf16_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The CPU flags that give bfloat16 matmuls native speed (AVX512-BF16, AMX), if any."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return []
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return [flag for flag in BF16_CPU_FLAGS if flag in flags]


def host_memory_bytes() -> int | None:
    """Total physical memory of the host, if the OS tells."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def nvml_gpus() -> tuple[str | None, list[dict[str, Any]]]:
    """Driver version and per-GPU facts from NVML; ``(None, [])`` without a driver.

    Honours ``CUDA_VISIBLE_DEVICES`` only as far as NVML does (it does not), so
    callers that need the visible subset filter by index themselves.
    """
    try:
        import pynvml
    except ImportError:
        return None, []
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            try:  # the PCI device ID keys the reference table (workloads accept, MFU peaks)
                pci = pynvml.nvmlDeviceGetPciInfo(handle)
                pci_device_id: int | None = int(pci.pciDeviceId) >> 16
            except Exception:
                pci_device_id = None
            gpus.append(
                {
                    "index": index,
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "compute_capability": f"{major}.{minor}",
                    "memory_total_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    "pci_device_id": pci_device_id,
                }
            )
        return driver, gpus
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def package_version(name: str) -> str | None:
    """Installed distribution version, or None (no import, so it is cheap)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def framework_versions() -> dict[str, str | None]:
    """Versions of the frameworks that matter for a figure, imported or not."""
    tf = None
    for dist in ("tensorflow", "tensorflow-cpu", "tf-nightly"):
        tf = tf or package_version(dist)
    return {
        "python": platform.python_version(),
        "tensorflow": tf,
        "keras": package_version("keras"),
        "jax": package_version("jax"),
        "torch": package_version("torch"),
        "numpy": package_version("numpy"),
        "workloads": package_version("workloads"),
    }


def tensorflow_build_info() -> dict[str, str | None]:
    """CUDA and cuDNN versions TensorFlow was built against, if TF is already imported."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return {"cuda": None, "cudnn": None}
    info = dict(tf.sysconfig.get_build_info())
    return {"cuda": info.get("cuda_version"), "cudnn": info.get("cudnn_version")}


def collect_env() -> dict[str, Any]:
    """Everything a reader needs to know where a record's figures came from."""
    driver, gpus = nvml_gpus()
    build = tensorflow_build_info()
    return {
        "host": platform.node(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": host_memory_bytes(),
        "gpus": [gpu["name"] for gpu in gpus],
        "driver": driver,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "keras_backend": os.environ.get("KERAS_BACKEND", "tensorflow"),
        "versions": framework_versions(),
        "cuda_build": build["cuda"],
        "cudnn_build": build["cudnn"],
        "in_container": os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
    }
