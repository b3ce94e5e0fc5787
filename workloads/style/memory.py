"""How much memory a width needs, checked before anything is allocated.

"Out of memory at large sizes" is what neural-style's users report most; the
framework's own OOM arrives after minutes of set-up, as a page of allocator log.
This estimate is approximate on purpose (the framework, XLA and cuDNN's workspace
choices move the real figure by tens of percent): it is the activation memory of
VGG19 up to block5_conv2 for one image, times a factor for what the backward pass
keeps, plus the weights and the style images' forward passes. It refuses only
sizes that clearly cannot fit and names the largest width that should.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from workloads.errors import WorkloadError
from workloads.style.vgg import layers_used

BYTES_PER_FLOAT = 4
# Forward activations kept for the gradient, the gradients themselves, and the
# pre-activation conv outputs TensorFlow keeps beside the ReLU outputs. Measured on
# the CPU (TensorFlow 2.21, width 512 → 1024) the real figure is about 2; GPUs add
# cuDNN workspaces, so 3 leaves room.
TRAINING_FACTOR = 3
# CUDA context, allocator slack, framework buffers.
FIXED_OVERHEAD_BYTES = 512 * 2**20
# Use at most this share of what is free: allocators fragment.
USABLE_SHARE = 0.9


def floats_per_pixel() -> float:
    """Activation floats per pixel of the input image, summed over the layers used."""
    total = 0.0
    downsample = 1
    for _, kind, channels in layers_used():
        if kind == "pool":
            downsample *= 2
        total += channels / downsample**2
    return total


def weight_bytes() -> int:
    """Bytes of the convolution kernels and biases up to the last layer used."""
    params, channels_in = 0, 3
    for _, kind, channels in layers_used():
        if kind == "conv":
            params += 9 * channels_in * channels + channels
            channels_in = channels
    return params * BYTES_PER_FLOAT


def estimate_bytes(height: int, width: int, style_pixels: int) -> int:
    """Approximate peak bytes of one run: optimised image, style targets, weights."""
    per_pixel = floats_per_pixel() * BYTES_PER_FLOAT
    optimised = height * width * per_pixel * TRAINING_FACTOR
    styles = style_pixels * per_pixel  # forward only, once
    return int(optimised + styles + weight_bytes() + FIXED_OVERHEAD_BYTES)


@dataclass(frozen=True)
class Budget:
    """Memory the run may use, and on what (for the message)."""

    free_bytes: int
    device: str


def visible_gpu_free_bytes() -> Budget | None:
    """Free memory of the first GPU CUDA_VISIBLE_DEVICES leaves visible, via NVML."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver
        return None
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return None
        first = (visible or "0").split(",")[0].strip()
        if first.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(first))
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(first)
        name = pynvml.nvmlDeviceGetName(handle)
        name = name.decode() if isinstance(name, bytes) else str(name)
        return Budget(int(pynvml.nvmlDeviceGetMemoryInfo(handle).free), f"GPU {first} ({name})")
    except Exception:
        return None
    finally:
        pynvml.nvmlShutdown()


def host_available_bytes() -> Budget:
    """MemAvailable from /proc/meminfo (what can be allocated without swapping)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return Budget(int(line.split()[1]) * 1024, "host memory")
    except OSError:
        pass
    return Budget(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES"), "host memory")


def current_budget() -> Budget:
    return visible_gpu_free_bytes() or host_available_bytes()


def largest_width(aspect: float, style_pixels_per_width2: float, budget: int) -> int:
    """The largest output width whose estimate fits ``budget`` (estimate ∝ width²)."""
    per_pixel = floats_per_pixel() * BYTES_PER_FLOAT
    per_width2 = aspect * per_pixel * TRAINING_FACTOR + style_pixels_per_width2 * per_pixel
    room = budget - weight_bytes() - FIXED_OVERHEAD_BYTES
    return max(0, math.floor(math.sqrt(max(room, 0) / per_width2)))


def check_fits(height: int, width: int, style_pixels: int, budget: Budget | None = None) -> int:
    """Raise with the largest width that fits when the estimate exceeds the budget."""
    budget = budget or current_budget()
    need = estimate_bytes(height, width, style_pixels)
    usable = int(budget.free_bytes * USABLE_SHARE)
    if need <= usable:
        return need
    fits = largest_width(height / width, style_pixels / width**2, usable)
    raise WorkloadError(
        f"width {width} needs about {need / 2**30:.1f} GiB but "
        f"{budget.device} has {budget.free_bytes / 2**30:.1f} GiB free",
        f"use --width {fits} or less (the largest that should fit)",
    )
