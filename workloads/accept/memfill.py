"""The soak's memory coverage: a stated fraction of each GPU's memory, written and read back.

The soak's matmuls touch under a GiB, under 1 % of an H200: a stuck or flipping bit in the
rest of the memory would pass. So while the soak runs, each GPU also holds blocks covering
``SOAK_MEMORY_FRACTION`` of the memory free when the soak starts, and on every soak iteration
it rewrites them with a pattern of a new seed, then reads them back on the device:

* the pattern: element i (counted over the device's blocks) is x_i = (i·K + seed) mod 2^32,
  K = 2654435761 (Knuth's multiplicative hash: neighbouring words differ in many bits), a
  uint32 the device computes from its index, never copied from the host;
* the read-back: the sum of every x_i modulo 2^32, on the device (wrapping uint32 in JAX,
  exact int64 in TensorFlow, taken modulo 2^32 on the host). Its exact value needs no device:
  Σ x_i ≡ K·n(n-1)/2 + seed·n (mod 2^32). A single flipped bit b moves the sum by ±2^b,
  never 0 modulo 2^32, so it fails; a bit stuck at one value fails in the passes whose seed
  asks for the other.

A device that cannot allocate the whole fraction keeps what it could, less some room for the
soak's own work (``SHORT_HEADROOM_BYTES``), and says so (``warn``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MOD = 1 << 32
MULTIPLIER = 2654435761  # Knuth's 2^32/φ: consecutive indices map to words far apart
ITEM_BYTES = 4  # one uint32 (int32 in TensorFlow, the same bits)
MIB = 1 << 20
# Half of what is free at the start: the rest is the soak's matmul operands, the framework's
# workspace and allocator slack, and whatever else runs on the GPU; more invites an OOM that
# says nothing about the memory, less leaves most of it unchecked.
SOAK_MEMORY_FRACTION = 0.5
GPU_BLOCK_BYTES = 256 * MIB  # one allocation: few enough to dispatch quickly, small enough to fit
CPU_FILL_BYTES = 4 * MIB  # the CPU backend's fill: the host's RAM is not the GPU's, tests stay fast
CPU_BLOCK_BYTES = 1 * MIB
UNKNOWN_GPU_FILL_BYTES = 1 << 30  # a GPU whose free memory nobody reports: 1 GiB, and a warn
# Given back after an allocation fails: the device is then full, and the soak's products and
# the pattern's own temporaries (TensorFlow's int64 arithmetic: a few times a block) need room.
SHORT_HEADROOM_BYTES = 2 << 30


@dataclass(frozen=True)
class Plan:
    """How much of one device the soak covers, and where the figure came from."""

    nbytes: int  # to fill: whole blocks
    block_bytes: int
    free: int | None  # free at the start, where known
    total: int | None
    source: str  # where the size came from, in words, for the row
    sized: bool = True  # False: a GPU whose free memory nobody reported (a fixed 1 GiB)

    @property
    def headroom_blocks(self) -> int:
        """Blocks given back when an allocation fails (one where blocks are MiB-sized)."""
        if self.block_bytes < GPU_BLOCK_BYTES:
            return 1
        return max(1, SHORT_HEADROOM_BYTES // self.block_bytes)

    @property
    def blocks(self) -> list[tuple[int, int]]:
        """Each block's first element and element count."""
        per = self.block_bytes // ITEM_BYTES
        return [(b * per, per) for b in range(self.nbytes // self.block_bytes)]


def plan_for(kind: str, free: int | None, total: int | None, source: str) -> Plan:
    """The fill for a device of ``kind`` with ``free`` of ``total`` bytes free (if known)."""
    if kind != "GPU":
        return Plan(CPU_FILL_BYTES, CPU_BLOCK_BYTES, None, None, "the CPU backend's fixed size")
    if free is None:
        return Plan(UNKNOWN_GPU_FILL_BYTES, GPU_BLOCK_BYTES, None, total,
                    "a fixed 1 GiB: neither NVML nor the backend reported free memory", False)
    wanted = int(free * SOAK_MEMORY_FRACTION)
    block = GPU_BLOCK_BYTES if wanted >= GPU_BLOCK_BYTES else CPU_BLOCK_BYTES
    return Plan(max(wanted // block, 1) * block, block, free, total,
                f"{100 * SOAK_MEMORY_FRACTION:.0f} % of the {free / (1 << 30):,.1f} GiB "
                f"free at the start, read from {source}")


def seed(pass_number: int) -> int:
    """Each pass's seed: different every pass (odd multiples of 2^32/φ, so bits move)."""
    return ((2 * pass_number + 1) * 0x9E3779B9 + 0x5EED) % MOD


def expected(seed_value: int, elements: int) -> int:
    """Σ x_i mod 2^32 over the first ``elements`` of the pattern: closed form, no device."""
    return (MULTIPLIER * (elements * (elements - 1) // 2) + seed_value * elements) % MOD


def pattern(start: int, count: int, seed_value: int) -> np.ndarray:
    """Elements start..start+count of the pattern, on the host (tests check the kernels')."""
    i = (np.arange(count, dtype=np.uint64) + np.uint64(start)) % np.uint64(MOD)
    return ((i * np.uint64(MULTIPLIER) + np.uint64(seed_value)) % np.uint64(MOD)).astype(
        np.uint32)


@dataclass
class Fill:
    """What one device's memory coverage did: its plan, what it held, each pass's read-back."""

    plan: Plan
    filled_bytes: int = 0
    short: str = ""  # why it holds less than planned ("" when it holds all)
    seeds: list[int] = field(default_factory=list)
    sums: list[int] = field(default_factory=list)  # the device's read-back, mod 2^32

    @property
    def elements(self) -> int:
        return self.filled_bytes // ITEM_BYTES


@dataclass
class Backend:
    """A backend's three steps on one block (its handle, the block's first element, a seed)."""

    allocate: Callable[[Any, int, int, int], Any]  # (device handle, start, count, seed) -> block
    rewrite: Callable[[Any, int, int], Any]  # (block, start, seed) -> block (in place or new)
    read: Callable[[Any], Any]  # block -> a pending sum (anything ``int`` reads)


class Coverage:
    """Every device's blocks, held for the soak; ``step`` is one pass on every device."""

    def __init__(self, backend: Backend, plans: dict[str, tuple[Any, Plan]]) -> None:
        self.backend = backend
        self.fills = {label: Fill(plan) for label, (_, plan) in plans.items()}
        self.blocks: dict[str, list[tuple[int, Any]]] = {}
        first = seed(0)
        for label, (handle, plan) in plans.items():
            held = self.blocks.setdefault(label, [])
            for start, count in plan.blocks:
                try:
                    block = backend.allocate(handle, start, count, first)
                    int(backend.read(block))  # waits: an allocation that fails, fails here
                except Exception as error:  # any failure to allocate degrades
                    line = str(error).strip().splitlines()
                    self.fills[label].short = line[0][:200] if line else type(error).__name__
                    for _ in range(min(plan.headroom_blocks, len(held))):
                        held.pop()
                        self.fills[label].filled_bytes -= count * ITEM_BYTES
                    break
                held.append((start, block))
                self.fills[label].filled_bytes += count * ITEM_BYTES

    def step(self) -> None:
        """Rewrite every block with the next pass's seed, then read every block back."""
        for label, held in self.blocks.items():
            if not held:
                continue
            value = seed(len(self.fills[label].seeds) + 1)
            self.blocks[label] = [(s, self.backend.rewrite(b, s, value)) for s, b in held]
            self.fills[label].seeds.append(value)
        pending = {label: [self.backend.read(b) for _, b in held]
                   for label, held in self.blocks.items() if held}
        for label, sums in pending.items():
            self.fills[label].sums.append(sum(int(s) for s in sums) % MOD)
