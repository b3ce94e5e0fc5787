"""The soak's memory coverage: a stated fraction of each GPU written and read back, every pass.

The pattern's closed-form sum is checked against the host's own pattern over a fixed-seed
corpus of seeds, lengths and starting indices (past 2^32 too), and every single flipped bit of
a corpus is caught; the real TensorFlow and JAX kernels write the host's pattern and run the
coverage on this machine's CPU. The verdicts run on boards built from NVIDIA's definitions
(``tests.host.nvml_boards``: an H200's 140.4 GiB, read through nvmlDeviceGetMemoryInfo) with
read-backs planted wrong: on a one-GPU host, on every GPU at once, and a device that could
allocate only part of what it was asked.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from tests.host import nvml_boards
from tests.host.fake_nvml import FakeNvml
from tests.workloads.test_accept_p2p_soak import PlantedSoak, _sizes, planted_memory
from workloads.accept import memfill, soak
from workloads.accept.checks import Target
from workloads.accept.kernels import Device, SoakRun
from workloads.accept.verdicts import FAIL, PASS, WARN
from workloads.hardware.nvml import Watcher
from workloads.hardware.reference import load


def _corpus(seed: int, count: int) -> list[tuple[int, int, int]]:
    """(start, length, seed) triples: short and long runs, starting near and past 2^32."""
    pick = random.Random(seed)
    starts = [0, 1, memfill.MOD - 7, memfill.MOD + 3, 5 * memfill.MOD - 1000]
    lengths = [1, 2, 255, 4096, pick.randrange(1, 1 << 16)]
    return [(pick.choice(starts) + pick.randrange(1 << 10), pick.choice(lengths),
             pick.randrange(memfill.MOD)) for _ in range(count)]


def _range_sum(seed: int, start: int, count: int) -> int:
    """The closed form over elements start..start+count (the device sums from element 0)."""
    return (memfill.expected(seed, start + count) - memfill.expected(seed, start)) % memfill.MOD


@pytest.mark.parametrize(("start", "count", "seed"), _corpus(1, 40))
def test_the_closed_form_is_the_sum_of_the_hosts_pattern(start: int, count: int, seed: int) -> None:
    x = memfill.pattern(start, count, seed).astype(np.int64)
    assert int(x.sum()) % memfill.MOD == _range_sum(seed, start, count)
    i = np.arange(start, start + count, dtype=object)
    assert [int(v) for v in x] == [(int(k) * memfill.MULTIPLIER + seed) % memfill.MOD for k in i]


@pytest.mark.parametrize("corpus", range(20))
def test_one_flipped_bit_anywhere_changes_the_read_back(corpus: int) -> None:
    pick = random.Random(corpus)
    seed, count = pick.randrange(memfill.MOD), pick.randrange(1, 1 << 14)
    x = memfill.pattern(0, count, seed)
    for _ in range(32):
        flipped = x.copy()
        flipped[pick.randrange(count)] ^= np.uint32(1 << pick.randrange(32))
        assert int(flipped.astype(np.int64).sum()) % memfill.MOD != memfill.expected(seed, count)


def test_every_pass_has_its_own_seed() -> None:
    seeds = [memfill.seed(p) for p in range(10_000)]
    assert len(set(seeds)) == len(seeds)


def _kernel_pattern(backend: str, start: int, count: int, seed: int) -> tuple[np.ndarray, int]:
    """The backend's own pattern and read-back sum (mod 2^32), on this CPU."""
    pytest.importorskip(backend)
    if backend == "jax":
        import jax.numpy as jnp

        from workloads.accept.kernels_jax import jax_pattern

        block = jax_pattern(jnp, count, jnp.uint32(start % memfill.MOD), jnp.uint32(seed))
        return np.asarray(block), int(block.sum(dtype=jnp.uint32))
    import tensorflow as tf

    from workloads.accept.kernels_tf import tf_pattern, tf_read

    block = tf_pattern(tf, tf.constant(start, tf.int64), count, tf.constant(seed, tf.int64))
    return block.numpy().view(np.uint32), int(tf_read(tf, block)) % memfill.MOD


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_kernels_write_the_hosts_pattern_and_read_back_its_sum(backend: str) -> None:
    for start, count, seed in _corpus(2, 12):
        block, total = _kernel_pattern(backend, start, count, seed)
        assert np.array_equal(block, memfill.pattern(start, count, seed)), (start, count, seed)
        assert total == _range_sum(seed, start, count)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_the_real_kernels_cover_memory_on_this_cpu(backend: str) -> None:
    """The CPU backend fills its fixed 4 MiB and reads it back once per soak iteration."""
    from workloads.accept.backends import load_kernels

    pytest.importorskip(backend)
    kernels = load_kernels(backend, 1)
    rows = soak.check_soak(kernels, [Target(kernels.devices()[0])], _sizes_small(), 0.01,
                           load(), lambda _: None)
    [results] = [r for r in rows if r.item == "results"]
    [memory] = [r for r in rows if r.item == "memory"]
    assert results.verdict == PASS and memory.verdict == PASS, memory.reason
    passes = memory.details["passes"]
    assert passes >= 3 and passes == results.details["iterations"]
    assert memory.reason.startswith(f"memory: 4.0 MiB written and read back {passes} times")
    assert "the CPU backend's fixed size" in memory.reason


def _sizes_small() -> Any:
    from dataclasses import replace

    return replace(_sizes(), soak_matrix=32)


def _nvml_soak(kernels: Any, board: nvml_boards.Board, count: int) -> list[Any]:
    """The soak on ``count`` GPUs of ``board``, sized from their NVML memory readings."""
    watcher = Watcher(FakeNvml(nvml_boards.healthy(board, count)))
    targets = [Target(Device("GPU", w.facts.index, w.facts.name, None), w,
                      load().model_for(w.facts.pci_device_id)) for w in watcher.gpus]
    rows = soak.check_soak(kernels, targets, _sizes(), 300.0, load(), lambda _: None,
                           memory=watcher.memory_info)
    return [r for r in rows if r.item == "memory"]


def test_the_row_states_the_fraction_and_bytes_covered() -> None:
    rows = _nvml_soak(PlantedSoak({}), nvml_boards.H200_SXM, 8)
    assert [r.verdict for r in rows] == [PASS] * 8
    # An H200 reports 150,754,820,096 bytes (140.4 GiB), 532,676,608 of them in use when idle.
    free = nvml_boards.H200_SXM.memory_bytes - 532_676_608
    filled = int(free * memfill.SOAK_MEMORY_FRACTION) // memfill.GPU_BLOCK_BYTES * (
        memfill.GPU_BLOCK_BYTES)
    assert rows[0].details["filled_bytes"] == filled
    assert rows[0].reason.startswith(
        "memory: 69.8 GiB of 140.4 GiB (50 %) written and read back 12 times, every read-back "
        "equal to the host's sum (50 % of the 139.9 GiB free at the start, read from NVML)")


class FlippedReadBack(PlantedSoak):
    """A kernel stand-in whose chosen devices read their memory back with one bit flipped."""

    def __init__(self, flipped_from: dict[str, int]) -> None:
        super().__init__({})
        self.flipped_from = flipped_from

    def soak_checksums(self, devices: list[Device], size: int, seconds: float,
                       fill: dict[str, memfill.Plan] | None = None) -> SoakRun:
        run = super().soak_checksums(devices, size, seconds, fill)
        run.memory = planted_memory(fill, self.flipped_from)
        return run


def test_a_one_gpu_host_whose_memory_reads_back_wrong_fails_naming_the_gpu_and_pass() -> None:
    [row] = _nvml_soak(FlippedReadBack({"GPU 0": 4}), nvml_boards.H200_SXM, 1)
    assert row.verdict == FAIL and row.device == "GPU 0"
    assert "8 of 12 passes over 69.8 GiB of 140.4 GiB (50 %) differ" in row.reason
    assert "(first: pass 5)" in row.reason


def test_gpus_whose_memory_all_reads_back_wrong_the_same_way_all_fail() -> None:
    wrong = {f"GPU {i}": 0 for i in range(8)}
    rows = _nvml_soak(FlippedReadBack(wrong), nvml_boards.H100_SXM5_80GB, 8)
    assert [(r.device, r.verdict) for r in rows] == [(f"GPU {i}", FAIL) for i in range(8)]
    assert all("12 of 12 passes" in r.reason and "(first: pass 1)" in r.reason for r in rows)


class HostBlocks:
    """A host-memory backend for ``memfill.Coverage`` whose allocator runs out after ``room``
    blocks, as a GPU whose memory another process holds (the error text is XLA's)."""

    def __init__(self, room: int) -> None:
        self.room = room

    def backend(self) -> memfill.Backend:
        def allocate(handle: Any, start: int, count: int, seed: int) -> np.ndarray:
            if self.room == 0:
                raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                                   f"{count * 4} bytes.\nBufferAssignment ...")
            self.room -= 1
            return memfill.pattern(start, count, seed)

        def rewrite(block: np.ndarray, start: int, seed: int) -> np.ndarray:
            block[:] = memfill.pattern(start, len(block), seed)
            return block

        return memfill.Backend(allocate, rewrite, lambda b: int(b.astype(np.int64).sum()))


def _short_plan() -> memfill.Plan:
    return memfill.plan_for("GPU", 8 * memfill.MIB, 16 * memfill.MIB, "NVML")


def test_a_device_that_cannot_allocate_the_fraction_keeps_what_it_could_and_warns() -> None:
    plan = _short_plan()
    assert plan.nbytes == 4 * memfill.MIB and len(plan.blocks) == 4
    coverage = memfill.Coverage(HostBlocks(3).backend(), {"GPU 0": (None, plan)})
    for _ in range(5):
        coverage.step()
    fill = coverage.fills["GPU 0"]
    # Three blocks fitted; one is given back as room for the soak's own work.
    assert fill.filled_bytes == 2 * memfill.MIB and fill.short.startswith("RESOURCE_EXHAUSTED")
    row = soak.memory_result("GPU 0", plan, SoakRun({}, 1.0, 32, memory=coverage.fills))
    assert row.verdict == WARN
    assert row.reason.startswith("memory: 2.0 MiB of 16.0 MiB (12 %) written and read back 5 "
                                 "times, every read-back equal to the host's sum; only this much "
                                 "could be allocated of the 4.0 MiB asked")
    assert "RESOURCE_EXHAUSTED: Out of memory" in row.reason and "\n" not in row.reason


def test_a_device_that_could_allocate_nothing_fails() -> None:
    plan = _short_plan()
    coverage = memfill.Coverage(HostBlocks(0).backend(), {"GPU 0": (None, plan)})
    coverage.step()
    row = soak.memory_result("GPU 0", plan, SoakRun({}, 1.0, 32, memory=coverage.fills))
    assert row.verdict == FAIL and "no memory pass finished (RESOURCE_EXHAUSTED" in row.reason


def test_a_soak_that_returns_no_coverage_fails_closed() -> None:
    row = soak.memory_result("GPU 3", _short_plan(), SoakRun({}, 1.0, 32))
    assert row.verdict == FAIL and "no memory coverage" in row.reason


def test_a_gpu_whose_free_memory_nobody_reports_is_covered_a_little_and_warns() -> None:
    class Silent(PlantedSoak):
        def memory_stats(self, device: Device) -> tuple[int, int] | None:
            return None

    target = Target(Device("GPU", 0, "NVIDIA H200", None))
    kernels: Any = Silent({})
    rows = soak.check_soak(kernels, [target], _sizes(), 300.0, load(), lambda _: None)
    [row] = [r for r in rows if r.item == "memory"]
    assert row.verdict == WARN and "the share checked is unknown" in row.reason
    assert row.details["filled_bytes"] == memfill.UNKNOWN_GPU_FILL_BYTES


def test_the_backends_memory_stats_size_it_without_nvml() -> None:
    target = Target(Device("GPU", 0, "NVIDIA H100", None))
    kernels: Any = PlantedSoak({})
    rows = soak.check_soak(kernels, [target], _sizes(), 300.0, load(), lambda _: None)
    [row] = [r for r in rows if r.item == "memory"]
    assert row.verdict == PASS
    assert "memory: 20.0 GiB of 80.0 GiB (25 %)" in row.reason
    assert "read from the backend's memory stats" in row.reason


def test_a_pool_the_framework_reserved_is_counted_free_to_the_soak() -> None:
    """JAX reserves most of a GPU at start: NVML counts it used, the backend's stats free; the
    larger free figure sizes the fill, and the share is still of NVML's whole device."""
    board = nvml_boards.healthy(nvml_boards.H100_SXM5_80GB, 1)
    for reading in board["gpus"][0]["readings"]:
        reading["used"] = nvml_boards.H100_SXM5_80GB.memory_bytes * 3 // 4
    watcher = Watcher(FakeNvml(board))
    [w] = watcher.gpus
    target = Target(Device("GPU", 0, w.facts.name, None), w)
    kernels: Any = PlantedSoak({})  # its backend reports 40 GiB of an 80 GiB pool free
    rows = soak.check_soak(kernels, [target], _sizes(), 300.0, load(), lambda _: None,
                           memory=watcher.memory_info)
    [row] = [r for r in rows if r.item == "memory"]
    assert row.verdict == PASS and row.details["filled_bytes"] == 20 << 30
    assert "memory: 20.0 GiB of 79.6 GiB (25 %)" in row.reason
    assert "read from the backend's memory stats" in row.reason


def test_a_gpu_that_runs_out_gives_back_room_for_the_soaks_own_work() -> None:
    """Twelve 256 MiB blocks fit, the thirteenth does not: 2 GiB (eight) are given back, so the
    products and the pattern's temporaries still fit. Blocks here are tokens, not memory."""
    plan = memfill.plan_for("GPU", 20 << 30, 80 << 30, "NVML")
    made: list[int] = []

    def allocate(handle: Any, start: int, count: int, seed: int) -> int:
        if len(made) == 12:
            raise RuntimeError("CUDA_ERROR_OUT_OF_MEMORY: out of memory")
        made.append(start)
        return start

    backend = memfill.Backend(allocate, lambda block, start, seed: block, lambda block: 0)
    fill = memfill.Coverage(backend, {"GPU 0": (None, plan)}).fills["GPU 0"]
    assert fill.filled_bytes == 4 * memfill.GPU_BLOCK_BYTES
    assert fill.short == "CUDA_ERROR_OUT_OF_MEMORY: out of memory"
