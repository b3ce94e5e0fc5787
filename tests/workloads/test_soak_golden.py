"""The soak's golden answer: exact integer products, checked against the host's own sums.

The cases are ``workloads.accept.golden``'s own (every shape and dtype, at several sizes); the
host-side checksum is checked against the exact int64 product, the exactness of float32 and
bfloat16 against numpy's float32 product and bfloat16's 8-bit significand; a fixed-seed corpus
of single wrong elements is each caught. The soak's verdicts run on planted checksums (a device
that computes wrong on a one-GPU host; eight that are wrong the same way), and the real
TensorFlow and JAX kernels run the soak on this machine's CPU.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from tests.host import nvml_boards
from tests.workloads.test_accept_p2p_soak import _targets, planted_memory
from workloads.accept import golden, memfill
from workloads.accept.kernels import Device, SoakRun

SIZES = (16, 64, 256)


@pytest.mark.parametrize("size", SIZES)
def test_every_case_is_exact_in_its_dtype_and_its_checksum_is_the_exact_products(
    size: int,
) -> None:
    for case in golden.cases(size):
        a, b = golden.operands(case)
        exact = a.astype(np.int64) @ b.astype(np.int64)
        assert golden.expected(case) == golden.checksum(exact)
        bound = max(abs(case.low), abs(case.high)) ** 2 * case.k
        assert int(np.abs(exact).max()) <= bound
        if case.dtype == "float32":
            assert bound < 1 << 24  # float32's significand
            f32 = a.astype(np.float32) @ b.astype(np.float32)
            assert np.array_equal(f32.astype(np.int64), exact)
        else:
            assert bound <= 1 << 8  # bfloat16's significand: every integer up to 256 is exact


def test_the_cases_are_several_shapes_and_dtypes() -> None:
    plan = golden.cases(8192)
    assert {c.dtype for c in plan} == {"float32", "bfloat16"}
    assert len({(c.m, c.k, c.n) for c in plan}) == len(plan) >= 3
    assert all(c.k <= 16384 for c in plan)


@pytest.mark.parametrize("seed", range(40))
def test_a_single_wrong_element_anywhere_is_caught(seed: int) -> None:
    pick = random.Random(seed)
    case = pick.choice(golden.cases(pick.choice(SIZES)))
    a, b = golden.operands(case)
    product = a.astype(np.int64) @ b.astype(np.int64)
    i, j = pick.randrange(case.m), pick.randrange(case.n)
    product[i, j] += pick.choice([-1, 1]) * pick.randint(1, 1 << 16)
    assert golden.checksum(product) != golden.expected(case)


class GoldenSoak:
    """Checksums of a soak with a golden answer, in which chosen devices compute wrong."""

    def __init__(self, wrong: set[str], all_wrong: bool = False) -> None:
        self.wrong, self.all_wrong = wrong, all_wrong

    def memory_stats(self, device: Device) -> tuple[int, int] | None:
        return 40 << 30, 80 << 30

    def soak_checksums(
        self, devices: list[Device], size: int, seconds: float,
        fill: dict[str, memfill.Plan] | None = None,
    ) -> SoakRun:
        plan = golden.cases(16)
        cases = [plan[i % len(plan)] for i in range(9)]
        expected = [golden.expected(c) for c in cases]
        sums = {}
        for device in devices:
            bad = self.all_wrong or device.label in self.wrong
            sums[device.label] = [e ^ (1 << 40) if bad and i >= 4 else e
                                  for i, e in enumerate(expected)]
        return SoakRun(sums, seconds, size, [c.name for c in cases], expected,
                       max(c.nbytes for c in plan), planted_memory(fill))


def _soak(kernels: Any, gpus: int) -> list[Any]:
    from tests.workloads.test_accept_p2p_soak import _soak as run

    return [r for r in run(kernels, _targets(nvml_boards.H100_SXM5_80GB, gpus))
            if r.item == "results"]


def test_a_healthy_soak_passes_against_the_golden_answer() -> None:
    rows = _soak(GoldenSoak(set()), 8)
    assert [r.verdict for r in rows] == ["pass"] * 8
    assert "every one equal to the exact answer" in rows[0].reason


def test_a_one_gpu_host_that_computes_wrong_fails() -> None:
    [row] = _soak(GoldenSoak({"GPU 0"}), 1)
    assert row.verdict == "fail" and "5 of 9 products differ from the exact product" in row.reason
    assert "iteration 5" in row.reason


def test_gpus_that_are_all_wrong_the_same_way_all_fail() -> None:
    rows = _soak(GoldenSoak(set(), all_wrong=True), 8)
    assert [r.verdict for r in rows] == ["fail"] * 8


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_real_kernels_reach_the_golden_answer_on_this_cpu(backend: str) -> None:
    from workloads.accept.backends import load_kernels

    pytest.importorskip(backend)
    kernels = load_kernels(backend, 1)
    device = kernels.devices()[0]
    run = kernels.soak_checksums([device], 32, 0.0)
    assert run.cases == [c.name for c in golden.cases(32)]
    assert run.checksums[device.label] == run.expected


def _flipped_products(seed: int) -> list[tuple[golden.Case, np.ndarray, str]]:
    """The exact float32 product of each case with one bit of one element flipped: every bit
    position 0-31 (a fixed-seed element each), and a zero made 2^-60 and NaN."""
    rng = random.Random(seed)
    out = []
    for case in golden.cases(16):
        a, b = golden.operands(case)
        exact = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float32)
        for bit in range(32):
            wrong = exact.copy()
            i, j = rng.randrange(case.m), rng.randrange(case.n)
            flat = wrong.view(np.uint32)
            flat[i, j] ^= np.uint32(1 << bit)
            if wrong[i, j] == exact[i, j]:  # 0.0 -> -0.0: the same value
                continue
            out.append((case, wrong, f"{case.name} bit {bit} at ({i}, {j})"))
        zero = np.argwhere(exact == 0)[0]
        for value in (2.0 ** -60, float("nan")):
            wrong = exact.copy()
            wrong[tuple(zero)] = value
            out.append((case, wrong, f"{case.name} zero became {value}"))
    return out


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_device_sums_catch_every_single_bit_flip_fractions_and_nan_too(backend: str) -> None:
    """The device casts the product to integers for its sums: a flip of a low significand bit
    (3.0 -> 3.0000002) or a zero become a tiny fraction would vanish in that cast. Each flip of
    a fixed-seed corpus, every bit position, is caught by the real kernels' sums on this CPU."""
    pytest.importorskip(backend)
    if backend == "jax":
        import jax.numpy as jnp

        from workloads.accept.kernels_jax import soak_sums as jax_sums

        def sums(c: np.ndarray, u: np.ndarray, v: np.ndarray) -> Any:
            return jax_sums(jnp, jnp.asarray(c), u.astype(np.uint32), v.astype(np.uint32))
    else:
        import tensorflow as tf

        from workloads.accept.kernels_tf import soak_sums as tf_sums

        def sums(c: np.ndarray, u: np.ndarray, v: np.ndarray) -> Any:
            return tf_sums(tf, tf.constant(c), tf.constant(u), tf.constant(v)).numpy()
    missed = []
    for case, wrong, what in _flipped_products(7):
        u, v = golden.weights(case.m, 251), golden.weights(case.n, 241)
        s0, s1 = (int(x) % golden.MOD for x in np.asarray(sums(wrong, u, v)))
        if (s1 << 32 | s0) == golden.expected(case):
            missed.append(what)
    assert not missed, missed
