"""The soak's golden answer: products whose exact value is known without a GPU.

A soak that compares a GPU's products with its own first product and with its siblings'
passes a one-GPU host, and a host whose GPUs are all wrong the same way (one driver, one
firmware, one bad kernel). So the soak multiplies matrices whose product is exact in the
dtype it runs and checks each product against a checksum worked out on the host:

* integer-valued inputs: float32 cases draw from {-2..2} with K at most 16384, so every
  product element is an integer of magnitude at most 4·K = 65536 < 2^24, exact in float32
  (24-bit significand) whatever the order of the sums; the bfloat16 case draws from {-1, 0, 1}
  with K = 256, so every element is at most 256 in magnitude, exact in bfloat16 (8-bit
  significand), inputs and output alike;
* the checksum is Freivalds' check: with weights u_i = i mod 251 + 1 and v_j = j mod 241 + 1
  (never zero), s1 = Σ_ij u_i·C_ij·v_j = (uᵀA)(Bv) and s0 = Σ_ij C_ij = (1ᵀA)(B1), each
  computed on the host in O(n·k) exact integer arithmetic, no matmul. A wrong element δ at
  (i, j) moves s1 by δ·u_i·v_j, never zero (|δ|·251·241 < 2^32). Both are taken modulo 2^32,
  so a device may sum in wrapping uint32 (JAX) or exact int64 (TensorFlow) alike.

Several shapes and two dtypes, cycled through the soak's iterations; the memory a case
touches (A, B and C at once) is stated against the GPU's memory as the soak's coverage.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

MOD = 1 << 32


@dataclass(frozen=True)
class Case:
    name: str
    dtype: str  # "float32" or "bfloat16"
    m: int
    k: int
    n: int
    low: int  # inputs drawn from low..high (inclusive)
    high: int

    @property
    def itemsize(self) -> int:
        return 4 if self.dtype == "float32" else 2

    @property
    def nbytes(self) -> int:
        """A, B and C together, as the device holds them."""
        return (self.m * self.k + self.k * self.n + self.m * self.n) * self.itemsize


def cases(size: int) -> tuple[Case, ...]:
    """The soak's cases for a ``size``² soak: square and rectangular float32, bfloat16."""
    k = min(size, 16384)
    half = max(size // 2, 1)
    return (
        Case(f"float32 {size}x{k}x{size}", "float32", size, k, size, -2, 2),
        Case(f"float32 {2 * size}x{half}x{size}", "float32", 2 * size, min(half, 16384), size,
             -2, 2),
        Case(f"bfloat16 {size}x256x{size}", "bfloat16", size, 256, size, -1, 1),
    )


def weights(length: int, modulus: int) -> np.ndarray:
    return (np.arange(length, dtype=np.int64) % modulus) + 1


@cache
def operands(case: Case, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The case's A and B as int8 (the framework casts them to the case's dtype)."""
    rng = np.random.default_rng(seed)
    a = rng.integers(case.low, case.high + 1, size=(case.m, case.k), dtype=np.int8)
    b = rng.integers(case.low, case.high + 1, size=(case.k, case.n), dtype=np.int8)
    return a, b


def _exact(x: np.ndarray, y: np.ndarray) -> int:
    return int(np.dot(x.astype(object), y.astype(object)))


@cache
def expected(case: Case, seed: int = 0) -> int:
    """The checksum of the exact product: (s1 mod 2^32) << 32 | (s0 mod 2^32)."""
    a, b = operands(case, seed)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    s0 = _exact(a64.sum(axis=0), b64.sum(axis=1))
    s1 = _exact(weights(case.m, 251) @ a64, b64 @ weights(case.n, 241))
    return (s1 % MOD) << 32 | (s0 % MOD)


def checksum(product: np.ndarray) -> int:
    """The same checksum of a product already on the host (tests, and a check of the above)."""
    c = product.astype(np.int64)
    s0 = _exact(c.sum(axis=0), np.ones(c.shape[1], dtype=np.int64))
    s1 = _exact(weights(c.shape[0], 251), c @ weights(c.shape[1], 241))
    return (s1 % MOD) << 32 | (s0 % MOD)
