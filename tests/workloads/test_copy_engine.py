"""The copy-engine measurements against a simulated CUDA driver, and the transfer rows they make.

The driver stand-in (:mod:`tests.host.fake_cuda_driver`) has cuda-bindings' names and
enums and copies at the rate of the memory it is given: pinned host memory at the link's
rate, any other host pointer at the pageable rate an H200 showed (8.1 GB/s). The battery
measured that pageable path on the first real GPU and failed a healthy link; these tests
hold the code to pinned memory, event timing and releasing everything it takes.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from tests.host.fake_cuda_driver import CUresult, FakeCudaDriver
from workloads.accept import checks
from workloads.accept.checks import Sizes, Target
from workloads.accept.kernels import Device
from workloads.accept.verdicts import PASS, WARN
from workloads.hardware.copy_engine import CopyEngine, CopyEngineError, open_driver
from workloads.hardware.nvml import GpuFacts, GpuWatch
from workloads.hardware.reference import load

MIB = 1 << 20


def test_host_copies_come_from_pinned_memory_at_the_link_s_rate() -> None:
    driver = FakeCudaDriver(gpus=1, pinned_gbps=54.8, pageable_gbps=8.1)
    engine = CopyEngine(open_driver(driver))
    h2d = engine.host_to_device(0, 256 * MIB, 5)
    d2h = engine.device_to_host(0, 256 * MIB, 5)
    assert h2d == pytest.approx(54.8e9) and d2h == pytest.approx(54.8e9)
    assert [kind for kind, _ in driver.copies] == ["HtoD"] * 6 + ["DtoH"] * 6  # 1 warm-up each
    assert driver.released()


def test_peer_copies_enable_peer_access_where_the_driver_allows_it() -> None:
    driver = FakeCudaDriver(gpus=2, peer_gbps={(0, 1): 380.0}, peer_access={(0, 1)})
    run = CopyEngine(driver).peer(0, 1, 64 * MIB, 3)
    assert run.direct and run.rate == pytest.approx(380e9) and run.verified
    assert driver.peers_enabled == {(0, 1)} and driver.released()


def test_a_pair_without_peer_access_is_measured_through_the_host_and_says_so() -> None:
    driver = FakeCudaDriver(gpus=2, staged_gbps=12.0)
    run = CopyEngine(driver).peer(1, 0, 64 * MIB, 2)
    assert not run.direct and run.rate == pytest.approx(12e9) and driver.released()


@pytest.mark.parametrize("seed", range(6))
def test_a_pair_s_figure_is_the_median_of_its_copies_and_its_slowest_is_kept(seed: int) -> None:
    """nvbandwidth's statistic: one slow copy among five moves the median not at all."""
    rng = random.Random(seed)
    factors = [1.0] * 6  # the first is the untimed warm-up
    slow = rng.randrange(1, 6)
    factors[slow] = rng.uniform(0.1, 0.6)
    driver = FakeCudaDriver(gpus=2, peer_gbps={(0, 1): 380.0}, peer_access={(0, 1)},
                            peer_factors={(0, 1): factors})
    run = CopyEngine(driver).peer(0, 1, 16 * MIB, 5)
    assert run.rate == pytest.approx(380e9) and run.repeats == 5
    assert run.slowest == pytest.approx(380e9 * factors[slow]) and driver.released()


def test_copied_bytes_that_differ_from_those_sent_are_caught() -> None:
    driver = FakeCudaDriver(gpus=2, peer_gbps={(0, 1): 380.0}, peer_access={(0, 1)},
                            corrupt={(0, 1)})
    assert CopyEngine(driver).peer(0, 1, 16 * MIB, 3).verified is False
    assert CopyEngine(driver).peer(1, 0, 16 * MIB, 3).verified is True
    assert driver.released()


def test_a_failing_call_is_named_and_everything_taken_is_given_back() -> None:
    driver = FakeCudaDriver(gpus=1, fail={"cuMemAlloc": CUresult.CUDA_ERROR_OUT_OF_MEMORY})
    with pytest.raises(CopyEngineError, match="cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY"):
        CopyEngine(driver).host_to_device(0, 256 * MIB, 5)
    assert driver.released()


def test_no_driver_no_engine() -> None:
    assert open_driver(FakeCudaDriver(gpus=0)) is None
    assert open_driver(FakeCudaDriver(fail={"cuInit": CUresult.CUDA_ERROR_NO_DEVICE})) is None


def test_open_driver_without_a_gpu_library_here_is_none() -> None:
    """The real cuda-bindings on this machine: no libcuda, so no engine (and no exception)."""
    assert open_driver() is None


# --- the transfer rows ------------------------------------------------------------------


class EngineKernels:
    """The backend interface's transfer, measured by the copy engine over a simulated driver."""

    backend = "recorded"

    def __init__(self, driver: FakeCudaDriver, pinned: bool = True) -> None:
        self.engine = CopyEngine(driver)
        self.transfer_pinned = pinned
        self.transfer_method = "simulated"
        self.driver = driver

    def transfer_rate(self, device: Device, nbytes: int, repeats: int, to_device: bool) -> float:
        measure = self.engine.host_to_device if to_device else self.engine.device_to_host
        return measure(device.index, nbytes, repeats)


def _h200_target() -> Target:
    facts = GpuFacts(
        index=0, name="NVIDIA H200", uuid=None, pci_device_id=0x2335, pcie_max_generation=5,
        pcie_gpu_max_generation=5, pcie_max_width=16, max_sm_clock_mhz=1980,
        max_memory_clock_mhz=3201, power_limit_w=700, ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0, ecc_corrected_volatile=0, remapped_rows=(0, 0, False, False),
        retired_pages_pending=False, nvlink_active=0,
    )
    return Target(Device("GPU", 0, "NVIDIA H200", None), GpuWatch(facts), load().model_for(0x2335))


def _sizes() -> Sizes:
    return Sizes(8192, 1, 1, 1, 1, 1, 256 * MIB, 5, (MIB,), 1, 1, 1, 1)


@pytest.mark.parametrize(("pinned_gbps", "verdict"), [(54.8, PASS), (49.9, PASS)])
def test_a_healthy_h200_link_passes(pinned_gbps: float, verdict: str) -> None:
    """The first real H200's link: 54.8 GB/s pinned (PyTorch), 49.9 (JAX) of Gen5 x16's 63."""
    kernels: Any = EngineKernels(FakeCudaDriver(gpus=1, pinned_gbps=pinned_gbps))
    rows = checks.check_transfer(kernels, [_h200_target()], _sizes(), load(), lambda _: None)
    assert [r.verdict for r in rows] == [verdict, verdict]
    assert all(r.details["method"] == "simulated" for r in rows)


def test_a_pageable_measurement_is_not_judged_against_the_link() -> None:
    kernels: Any = EngineKernels(FakeCudaDriver(gpus=1), pinned=False)
    rows = checks.check_transfer(kernels, [_h200_target()], _sizes(), load(), lambda _: None)
    assert {r.verdict for r in rows} == {WARN}
    assert all("pageable" in r.reason and r.limit is None for r in rows)


def test_jax_copies_between_the_device_and_pinned_host_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Real JAX on this CPU: each timed copy goes between ``pinned_host`` and ``device``."""
    import jax

    from workloads.accept.kernels_jax import JaxKernels

    kinds: list[tuple[str | None, str | None]] = []
    put = jax.device_put

    def spy(x: Any, target: Any = None, **kwargs: Any) -> Any:
        source = getattr(getattr(x, "sharding", None), "memory_kind", None)
        kinds.append((source, getattr(target, "memory_kind", None)))
        return put(x, target, **kwargs)

    monkeypatch.setattr(jax, "device_put", spy)
    kernels = JaxKernels()
    device = Device("CPU", 0, "cpu", kernels.all[0])
    for to_device in (True, False):
        kinds.clear()
        assert kernels.transfer_rate(device, MIB, 2, to_device) > 0
        timed = kinds[1:]  # the first put makes the source buffer
        expected = ("pinned_host", "device") if to_device else ("device", "pinned_host")
        assert timed and set(timed) == {expected}, kinds
    assert kernels.transfer_pinned
