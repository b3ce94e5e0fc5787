"""The TensorFlow layer of the battery: ``tf.device`` placement, a MirroredStrategy all-reduce."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from workloads.accept import memfill
from workloads.accept.kernels import Device, SoakRun, best_rate, each_rate
from workloads.accept.memfill import Backend, Plan
from workloads.hardware.copy_engine import CopyEngine, PeerCopy, median_copy, process_engine

FLOAT32_BYTES = 4


class TensorFlowKernels:
    backend = "tensorflow"

    def __init__(self, cpu_devices: int) -> None:
        import tensorflow as tf

        from workloads.devices import require_supported, setup_tensorflow

        self.tf = tf
        physical = tf.config.list_physical_devices("GPU")
        self.gpus = setup_tensorflow(tf, cpu_replicas=1 if physical else max(1, cpu_devices))
        require_supported(self.gpus)
        self._strategy: Any = None

    def devices(self) -> list[Device]:
        from workloads.envinfo import cpu_model

        if self.gpus:
            return [
                Device("GPU", g.index, g.name, f"/GPU:{g.index}", g.compute_capability)
                for g in self.gpus
            ]
        return [Device("CPU", 0, cpu_model(), "/CPU:0")]

    def collective_devices(self) -> list[Any]:
        kind = "GPU" if self.gpus else "CPU"
        return [d.name for d in self.tf.config.list_logical_devices(kind)]

    @contextlib.contextmanager
    def placed(self, device: Device, dtype: str) -> Iterator[None]:
        tf = self.tf
        before = tf.config.experimental.tensor_float_32_execution_enabled()
        tf.config.experimental.enable_tensor_float_32_execution(dtype == "tensorfloat32")
        try:
            with tf.device(device.handle):
                yield None
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(before)

    def copy_rate(self, device: Device, nbytes: int, repeats: int, rounds: int) -> float:
        tf = self.tf
        with tf.device(device.handle):
            x = tf.random.uniform([nbytes // FLOAT32_BYTES], dtype=tf.float32)

            def run() -> Callable[[], object]:
                y = x
                for _ in range(repeats):
                    y = x + 1.0  # reads x, writes y: 2 × nbytes through memory
                return lambda: float(y[0])

            run()()  # warm-up: kernel chosen, memory pool grown
            return best_rate(run, 2 * nbytes * repeats, rounds)

    def transfer_rate(self, device: Device, nbytes: int, repeats: int, to_device: bool) -> float:
        """Copies between pinned host memory and the GPU on its copy engines (cuda-bindings).

        TensorFlow exposes no pinned host buffer to copy from: a tensor made from NumPy
        is pageable, and a pageable copy measures the driver's staging, not the link.
        The CUDA driver API does what nvbandwidth does, in TensorFlow's own primary
        context (:mod:`workloads.hardware.copy_engine`). Without cuda-bindings the copy is
        TensorFlow's own, from pageable memory, and ``transfer_pinned`` says so.
        """
        engine = self._copy_engine()
        if engine is not None:
            measure = engine.host_to_device if to_device else engine.device_to_host
            return measure(device.index, nbytes, repeats)
        return self._pageable_rate(device, nbytes, repeats, to_device)

    @property
    def transfer_pinned(self) -> bool:
        return self._copy_engine() is not None

    @property
    def transfer_method(self) -> str:
        if self.transfer_pinned:
            return "pinned host memory, CUDA copy engines (cuda-bindings), as nvbandwidth"
        return "TensorFlow's copies from pageable host memory (cuda-bindings not usable here)"

    def _copy_engine(self) -> CopyEngine | None:
        return process_engine() if self.gpus else None

    def peer_devices(self) -> list[Device]:
        if self.gpus:
            return self.devices()
        names = [d.name for d in self.tf.config.list_logical_devices("CPU")]
        return [Device("CPU device", i, "CPU", name) for i, name in enumerate(names)]

    def peer_rate(
        self, source: Device, target: Device, nbytes: int, repeats: int
    ) -> PeerCopy:
        engine = self._copy_engine() if source.kind == "GPU" else None
        if engine is not None:
            return engine.peer(source.index, target.index, nbytes, repeats)
        tf = self.tf
        count = nbytes // FLOAT32_BYTES
        with tf.device(source.handle):
            x = tf.ones([count], tf.float32)
        copied: list[Any] = []

        def copy() -> Callable[[], object]:
            with tf.device(target.handle):
                y = tf.identity(x)
            copied[:] = [y]
            return lambda: float(y[0])

        copy()()  # warm-up
        rates = each_rate(copy, nbytes, repeats)
        with tf.device(target.handle):  # every element arrived as 1.0: their sum is exact
            total = float(tf.reduce_sum(tf.cast(copied[0], tf.float64)))
        return median_copy(rates, None, total == count)

    def memory_stats(self, device: Device) -> tuple[int, int] | None:
        """TensorFlow reports what it has allocated, not what is free: nothing to read."""
        return None

    def soak_checksums(
        self, devices: list[Device], size: int, seconds: float, fill: dict[str, Plan] | None = None
    ) -> SoakRun:
        """Integer-valued matmuls with a golden answer (``golden``) on every device, cycled.

        Each iteration is one case (shape and dtype) on every device at once; its product is
        exact in that dtype, cast to int64 (exact) and reduced to Freivalds' two sums, in
        int64 (no overflow: see ``golden``), then taken modulo 2^32 on the host. Each
        iteration also runs one pass of the memory coverage (``memfill``) on every device.
        """
        import time

        from workloads.accept import golden

        tf = self.tf
        plan = golden.cases(size)

        step = tf.function(lambda a, b, u, v: soak_sums(tf, tf.matmul(a, b), u, v),
                           jit_compile=False)
        operands = []
        for case in plan:
            a_host, b_host = golden.operands(case)
            dtype = tf.bfloat16 if case.dtype == "bfloat16" else tf.float32
            per_device = []
            for device in devices:
                with tf.device(device.handle):
                    per_device.append((
                        tf.cast(tf.constant(a_host), dtype), tf.cast(tf.constant(b_host), dtype),
                        tf.constant(golden.weights(case.m, 251)),
                        tf.constant(golden.weights(case.n, 241)),
                    ))
            operands.append(per_device)
        want = [golden.expected(case) for case in plan]
        plans = {d.label: (d.handle, (fill or {})[d.label]) for d in devices
                 if d.label in (fill or {})}
        coverage = memfill.Coverage(tf_memory(tf), plans)
        checksums: dict[str, list[int]] = {d.label: [] for d in devices}
        cases: list[str] = []
        expected: list[int] = []
        start = time.perf_counter()
        while True:
            turn = len(cases) % len(plan)
            pending = []
            for device, args in zip(devices, operands[turn], strict=True):
                with tf.device(device.handle):
                    pending.append(step(*args))
            coverage.step()
            for device, result in zip(devices, pending, strict=True):
                s0, s1 = (int(x) % golden.MOD for x in result.numpy())
                checksums[device.label].append(s1 << 32 | s0)
            cases.append(plan[turn].name)
            expected.append(want[turn])
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and len(cases) >= len(plan):
                return SoakRun(checksums, elapsed, size, cases, expected,
                               max(case.nbytes for case in plan), coverage.fills)

    def _pageable_rate(self, device: Device, nbytes: int, repeats: int, to_device: bool) -> float:
        import numpy as np

        tf = self.tf
        with tf.device("/CPU:0"):
            host = tf.constant(np.ones(nbytes // FLOAT32_BYTES, dtype=np.float32))
        with tf.device(device.handle):
            on_device = tf.identity(host)
        rates = []
        for attempt in range(repeats + 1):  # the first is a warm-up
            with tf.device(device.handle):
                if to_device:
                    rate = best_rate(lambda: _h2d(tf, host), nbytes, 1)
                else:
                    fresh = on_device + 0.0  # a new buffer: nothing cached on the host
                    float(fresh[0])
                    rate = best_rate(partial(_d2h, fresh), nbytes, 1)
            if attempt:
                rates.append(rate)
        return max(rates)

    def allreduce_time(self, nbytes: int, iterations: int) -> float:
        import time

        tf = self.tf
        strategy = self._mirrored()
        count = nbytes // FLOAT32_BYTES
        values = strategy.experimental_distribute_values_from_function(
            lambda _ctx: tf.ones([count], tf.float32)
        )

        @tf.function
        def step(v: Any) -> Any:
            return strategy.run(
                lambda x: tf.distribute.get_replica_context().all_reduce("SUM", x), args=(v,)
            )

        def wait(out: Any) -> None:
            for t in strategy.experimental_local_results(out):
                float(t[0])

        wait(step(values))  # warm-up: traced, communicators set up
        start = time.perf_counter()
        out = None
        for _ in range(iterations):
            out = step(values)
        wait(out)
        return (time.perf_counter() - start) / iterations

    def _mirrored(self) -> Any:
        if self._strategy is None:
            tf = self.tf
            devices = self.collective_devices()
            cross = None if self.gpus else tf.distribute.ReductionToOneDevice()
            self._strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=cross)
        return self._strategy


def soak_sums(tf: Any, product: Any, u: Any, v: Any) -> Any:
    """Freivalds' two sums of a soak product (``golden``), in int64.

    The product is cast to integers for the sums, which would drop a wrong fraction (a flipped
    low significand bit of 3.0, a zero whose bits became a subnormal that flush-to-zero reads
    as 0, NaN). An exact product's elements are whole numbers whose bits the round trip
    float32 -> int64 -> float32 keeps (but for the sign of a zero), so the count of elements
    whose bits it changes is added to the first sum.
    """
    f = tf.cast(product, tf.float32)
    c = tf.cast(f, tf.int64)
    moved = tf.bitwise.bitwise_and(
        tf.bitwise.bitwise_xor(tf.bitcast(f, tf.int32), tf.bitcast(tf.cast(c, tf.float32),
                                                                   tf.int32)), 0x7FFFFFFF)
    off = tf.reduce_sum(tf.cast(tf.not_equal(moved, 0), tf.int64))
    rows = tf.reduce_sum(c * v[None, :], axis=1)
    return tf.stack([tf.reduce_sum(c) + off, tf.reduce_sum(rows * u)])


def tf_pattern(tf: Any, start: Any, count: int, seed: Any) -> Any:
    """``memfill``'s pattern for elements start..start+count, as int32 (the uint32's bits).

    TensorFlow's GPU kernels do int64, not uint32, arithmetic: i·K mod 2^32 is worked out as
    hi·(K·2^16 mod 2^32) + lo·K with i's 16-bit halves (every product under 2^48, exact), and
    the uint32 is moved into int32's range by subtracting 2^32, so no cast depends on wrapping.
    """
    mask = tf.constant(memfill.MOD - 1, tf.int64)
    i = tf.bitwise.bitwise_and(tf.range(count, dtype=tf.int64) + start, mask)
    hi = tf.bitwise.right_shift(i, tf.constant(16, tf.int64))
    lo = tf.bitwise.bitwise_and(i, tf.constant(0xFFFF, tf.int64))
    x = tf.bitwise.bitwise_and(hi * ((memfill.MULTIPLIER << 16) % memfill.MOD)
                               + lo * memfill.MULTIPLIER + seed, mask)
    return tf.cast(tf.where(x >= 1 << 31, x - memfill.MOD, x), tf.int32)


def tf_read(tf: Any, block: Any) -> Any:
    """The block's elements as uint32 values, summed exactly in int64 (2^26 · 2^32 < 2^63)."""
    return tf.reduce_sum(tf.bitwise.bitwise_and(tf.cast(block, tf.int64),
                                                tf.constant(memfill.MOD - 1, tf.int64)))


def tf_memory(tf: Any) -> Backend:
    """The memory coverage's steps: blocks are variables, rewritten in place by ``assign``."""
    fresh = tf.function(lambda start, count, seed: tf_pattern(tf, start, count, seed))
    read = tf.function(lambda block: tf_read(tf, block))

    def allocate(handle: Any, start: int, count: int, seed: int) -> Any:
        with tf.device(handle):
            return tf.Variable(fresh(tf.constant(start, tf.int64), count,
                                     tf.constant(seed, tf.int64)), trainable=False)

    def rewrite(block: Any, start: int, seed: int) -> Any:
        with tf.device(block.device):
            block.assign(fresh(tf.constant(start, tf.int64), int(block.shape[0]),
                               tf.constant(seed, tf.int64)))
        return block

    def pending(block: Any) -> Any:
        with tf.device(block.device):
            return read(block)

    return Backend(allocate, rewrite, pending)


def _h2d(tf: Any, host: Any) -> Callable[[], object]:
    moved = tf.identity(host)  # placed on the device by the caller's scope: a host→device copy
    return lambda: float(moved[0])


def _d2h(tensor: Any) -> Callable[[], None]:
    tensor.numpy()
    return lambda: None
