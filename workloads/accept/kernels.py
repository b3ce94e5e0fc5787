"""The measurement kernels, behind one small interface with a thin layer per backend.

Production images run TensorFlow; some GPU machines have only JAX. The battery is
written once against :class:`Kernels`, and each backend supplies placement on a
device, a copy between host and device, and a collective all-reduce
(``kernels_tf``: ``tf.device`` and ``MirroredStrategy``; ``kernels_jax``:
``jax.default_device``, ``jax.jit`` and ``shard_map`` with ``psum``). The matmul
peak is :func:`workloads.roofline.matmul_rate`, the same microbenchmark the MFU
peaks come from, run under the backend's placement and matmul-precision settings.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from workloads.accept.memfill import Fill, Plan
from workloads.hardware.copy_engine import PeerCopy


@dataclass(frozen=True)
class Device:
    """A device the battery measures: a GPU or the host CPU."""

    kind: str  # "GPU", "CPU", or "CPU device" (one of the host's logical CPU devices)
    index: int  # the framework's index
    name: str  # as the framework (and NVML) names it
    handle: Any  # what the backend places work with ("/GPU:0", a jax.Device)
    compute_capability: tuple[int, int] | None = None

    @property
    def label(self) -> str:
        if self.kind == "CPU":
            return "CPU"
        return f"{self.kind} {self.index}"


class Kernels(Protocol):
    """What each backend layer provides."""

    backend: str

    def devices(self) -> list[Device]:
        """GPUs if any are visible, else the host CPU (one device)."""
        ...

    def collective_devices(self) -> list[Any]:
        """Every device an all-reduce runs across (GPUs, or the logical CPU devices)."""
        ...

    def placed(self, device: Device, dtype: str) -> contextlib.AbstractContextManager[Any]:
        """Run what follows on ``device`` with ``dtype``'s matmul math (TF32 on or off)."""
        ...

    def copy_rate(self, device: Device, nbytes: int, repeats: int, rounds: int) -> float:
        """Best bytes/s of an on-device copy (read + write) of ``nbytes``."""
        ...

    def transfer_rate(self, device: Device, nbytes: int, repeats: int, to_device: bool) -> float:
        """Best bytes/s of a host→device (or device→host) copy of ``nbytes``."""
        ...

    @property
    def transfer_pinned(self) -> bool:
        """Whether ``transfer_rate`` copies from pinned host memory (the link's own rate)."""
        ...

    @property
    def transfer_method(self) -> str:
        """How ``transfer_rate`` copies, in words, for the record."""
        ...

    def allreduce_time(self, nbytes: int, iterations: int) -> float:
        """Seconds per sum all-reduce of ``nbytes`` per rank across the collective devices."""
        ...

    def peer_devices(self) -> list[Device]:
        """The devices copied between pairwise: the GPUs, else the logical CPU devices."""
        ...

    def peer_rate(
        self, source: Device, target: Device, nbytes: int, repeats: int
    ) -> PeerCopy:
        """Copies ``source`` → ``target``: the median of ``repeats``, the slowest, verified.

        GPUs: the copy engines through cuda-bindings where it can be used (as nvbandwidth),
        else the framework's own device-to-device copy (its sum checked on arrival).
        """
        ...

    def soak_checksums(
        self, devices: list[Device], size: int, seconds: float, fill: dict[str, Plan] | None = None
    ) -> SoakRun:
        """Every device computes the same matmul over and over for ``seconds``; the checksums.

        ``fill`` (by device label): the memory each device also covers, one pass of
        ``memfill``'s pattern written and read back per iteration (``SoakRun.memory``).
        """
        ...

    def memory_stats(self, device: Device) -> tuple[int, int] | None:
        """The backend's own (free, total) bytes of ``device``, where it reports them."""
        ...


@dataclass
class SoakRun:
    """What the soak saw: per device, one checksum per iteration (the bits of each product)."""

    checksums: dict[str, list[int]]  # device label -> checksum of each iteration's product
    seconds: float
    size: int
    # The golden answer (workloads.accept.golden): each iteration's case and the checksum of
    # its exact product, worked out on the host; empty from a soak without one.
    cases: list[str] = field(default_factory=list)
    expected: list[int] = field(default_factory=list)
    touched_bytes: int = 0  # the largest case's A, B and C: the memory one product touches
    # The memory coverage (workloads.accept.memfill), by device label: empty without one.
    memory: dict[str, Fill] = field(default_factory=dict)


def matmul_rate(
    kernels: Kernels, device: Device, dtype: str, size: int, repeats: int, rounds: int
) -> float:
    """The roofline's matmul microbenchmark on ``device`` in ``dtype`` (FLOP/s).

    ``tensorfloat32`` runs float32 inputs with TF32 math on; ``float32`` with it off,
    so the float32 figure is the CUDA cores' and TF32's is the tensor cores'.
    """
    from workloads.roofline import matmul_rate as rate

    storage = "float32" if dtype == "tensorfloat32" else dtype
    with kernels.placed(device, dtype):
        return rate(storage, size=size, repeats=repeats, rounds=rounds)


def each_rate(run: Callable[[], Callable[[], object]], amount: float, rounds: int) -> list[float]:
    """``amount`` per second of each of ``rounds`` runs; ``run()`` starts one, returns its wait."""
    rates = []
    for _ in range(max(1, rounds)):
        start = time.perf_counter()
        wait = run()
        wait()
        seconds = time.perf_counter() - start
        rates.append(amount / seconds if seconds > 0 else 0.0)
    return rates


def best_rate(run: Callable[[], Callable[[], object]], amount: float, rounds: int) -> float:
    """Best ``amount`` per second over ``rounds``; ``run()`` starts one and returns its wait."""
    best = 0.0
    for _ in range(rounds):
        start = time.perf_counter()
        wait = run()
        wait()
        seconds = time.perf_counter() - start
        if seconds > 0:
            best = max(best, amount / seconds)
    return best
