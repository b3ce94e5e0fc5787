"""The TensorFlow layer of the battery: ``tf.device`` placement, a MirroredStrategy all-reduce."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from workloads.accept.kernels import Device, best_rate
from workloads.hardware.copy_engine import CopyEngine, open_driver

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
        self._engine: CopyEngine | bool | None = False  # False: not opened yet

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
        if self._engine is False:
            driver = open_driver() if self.gpus else None
            self._engine = CopyEngine(driver) if driver is not None else None
        return self._engine  # type: ignore[return-value]

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


def _h2d(tf: Any, host: Any) -> Callable[[], object]:
    moved = tf.identity(host)  # placed on the device by the caller's scope: a host→device copy
    return lambda: float(moved[0])


def _d2h(tensor: Any) -> Callable[[], None]:
    tensor.numpy()
    return lambda: None
