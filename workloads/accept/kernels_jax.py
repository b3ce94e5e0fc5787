"""The JAX layer of the battery: ``jax.default_device``, ``jax.jit``, ``shard_map`` + ``psum``.

Without an accelerator, the host platform is split into several devices by
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set by the command before
JAX starts), so the all-reduce runs across ranks there too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from workloads.accept import memfill
from workloads.accept.kernels import Device, SoakRun, best_rate, each_rate
from workloads.accept.memfill import Backend, Plan
from workloads.hardware.copy_engine import PeerCopy, median_copy, process_engine

FLOAT32_BYTES = 4
PINNED_HOST = "pinned_host"  # page-locked host memory: what the copy engines DMA from
DEVICE_MEMORY = "device"
PRECISION = {"float32": "float32", "tensorfloat32": "tensorfloat32"}


class JaxKernels:
    backend = "jax"
    transfer_pinned = True
    transfer_method = 'pinned host memory (JAX memory_kind="pinned_host"), as nvbandwidth'

    def __init__(self) -> None:
        import jax

        self.jax = jax
        self.all = jax.devices()
        self.accelerated = self.all[0].platform != "cpu"
        self._reduce: dict[int, Any] = {}

    def devices(self) -> list[Device]:
        from workloads.envinfo import cpu_model

        if self.accelerated:
            return [
                Device("GPU", i, str(getattr(d, "device_kind", d.platform)), d, _capability(d))
                for i, d in enumerate(self.all)
            ]
        return [Device("CPU", 0, cpu_model(), self.all[0])]

    def collective_devices(self) -> list[Any]:
        return list(self.all)

    @contextlib.contextmanager
    def placed(self, device: Device, dtype: str) -> Iterator[None]:
        jax = self.jax
        precision = PRECISION.get(dtype)
        scope = jax.default_matmul_precision(precision) if precision else contextlib.nullcontext()
        with jax.default_device(device.handle), scope:
            yield None

    def copy_rate(self, device: Device, nbytes: int, repeats: int, rounds: int) -> float:
        jax = self.jax
        import jax.numpy as jnp

        count = nbytes // FLOAT32_BYTES
        with jax.default_device(device.handle):
            x = jnp.ones(count, jnp.float32)
        add = jax.jit(lambda v: v + 1.0)

        def run() -> Callable[[], object]:
            y = x
            for _ in range(repeats):
                y = add(x)  # reads x, writes y: 2 × nbytes through memory
            return y.block_until_ready

        run()()  # warm-up: compiled, memory allocated
        return best_rate(run, 2 * nbytes * repeats, rounds)

    def transfer_rate(self, device: Device, nbytes: int, repeats: int, to_device: bool) -> float:
        """Copies between the device and pinned host memory (``memory_kind="pinned_host"``).

        A pinned buffer is what the copy engines move at the link's rate, as nvbandwidth
        and bandwidthTest measure it; ``device_put`` of a NumPy array copies from pageable
        memory through a staging buffer instead (8.1 / 1.5 GB/s on an H200 at Gen5 x16,
        against 49.9 / 47.1 GB/s pinned). Each copy is a new array, so nothing is cached.
        """
        import numpy as np
        from jax.sharding import SingleDeviceSharding

        jax = self.jax
        pinned = SingleDeviceSharding(device.handle, memory_kind=PINNED_HOST)
        on_device = SingleDeviceSharding(device.handle, memory_kind=DEVICE_MEMORY)
        host = np.ones(nbytes // FLOAT32_BYTES, dtype=np.float32)
        source = jax.device_put(host, pinned if to_device else on_device).block_until_ready()
        target = on_device if to_device else pinned
        rates = []
        for attempt in range(repeats + 1):  # the first is a warm-up
            rate = best_rate(lambda: jax.device_put(source, target).block_until_ready, nbytes, 1)
            if attempt:
                rates.append(rate)
        return max(rates)

    def allreduce_time(self, nbytes: int, iterations: int) -> float:
        import time

        import jax.numpy as jnp
        import numpy as np
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        jax = self.jax
        mesh = Mesh(np.array(self.all), ("ranks",))
        sharding = NamedSharding(mesh, P("ranks"))
        count = nbytes // FLOAT32_BYTES
        ranks = len(self.all)
        x = jax.jit(lambda: jnp.ones(count * ranks, jnp.float32), out_shardings=sharding)()
        reduce = jax.jit(
            jax.shard_map(
                lambda block: jax.lax.psum(block, "ranks"),
                mesh=mesh,
                in_specs=P("ranks"),
                out_specs=P("ranks"),
            )
        )
        reduce(x).block_until_ready()  # warm-up: compiled, communicators set up
        start = time.perf_counter()
        out = x
        for _ in range(iterations):
            out = reduce(x)
        out.block_until_ready()
        return (time.perf_counter() - start) / iterations


    def peer_devices(self) -> list[Device]:
        if self.accelerated:
            return self.devices()
        return [Device("CPU device", i, "CPU", d) for i, d in enumerate(self.all)]

    def peer_rate(
        self, source: Device, target: Device, nbytes: int, repeats: int
    ) -> PeerCopy:
        engine = process_engine() if source.kind == "GPU" else None
        if engine is not None:
            return engine.peer(source.index, target.index, nbytes, repeats)
        import jax.numpy as jnp

        jax = self.jax
        count = nbytes // FLOAT32_BYTES
        with jax.default_device(source.handle):
            x = jnp.ones(count, jnp.float32).block_until_ready()
        jax.device_put(x, target.handle).block_until_ready()  # warm-up
        copied: list[Any] = []

        def copy() -> Callable[[], object]:
            y = jax.device_put(x, target.handle)
            copied[:] = [y]
            return y.block_until_ready

        rates = each_rate(copy, nbytes, repeats)
        # Every element arrived as 1.0: their count is exact (an integer sum, no rounding).
        verified = int(jnp.sum(copied[0] == 1.0)) == count
        return median_copy(rates, None, verified)

    def memory_stats(self, device: Device) -> tuple[int, int] | None:
        """(free, total) from the device's allocator (``memory_stats``: GPUs; None on CPUs)."""
        try:
            stats = device.handle.memory_stats()
        except Exception:  # a backend without the figures: none to read
            return None
        if not stats or not stats.get("bytes_limit"):
            return None
        limit = int(stats["bytes_limit"])
        return max(limit - int(stats.get("bytes_in_use", 0)), 0), limit

    def soak_checksums(
        self, devices: list[Device], size: int, seconds: float, fill: dict[str, Plan] | None = None
    ) -> SoakRun:
        """Integer-valued matmuls with a golden answer (``golden``) on every device, cycled.

        Each product is exact in its dtype; it is converted to int32 (exact), viewed as
        uint32 and reduced to Freivalds' two sums in wrapping uint32 (modulo 2^32, as the
        host's golden checksum). Work goes to every device before any result is read. Each
        iteration also runs one pass of the memory coverage (``memfill``) on every device.
        """
        import time

        import jax.numpy as jnp
        import numpy as np

        from workloads.accept import golden

        jax = self.jax
        plan = golden.cases(size)

        @jax.jit
        def step(a: Any, b: Any, u: Any, v: Any) -> Any:
            return soak_sums(jnp, a @ b, u, v)

        operands = []
        for case in plan:
            a_host, b_host = golden.operands(case)
            dtype = jnp.bfloat16 if case.dtype == "bfloat16" else jnp.float32
            u = golden.weights(case.m, 251).astype(np.uint32)
            v = golden.weights(case.n, 241).astype(np.uint32)
            operands.append([
                tuple(jax.device_put(x, d.handle) for x in (
                    jnp.asarray(a_host, dtype=dtype), jnp.asarray(b_host, dtype=dtype), u, v))
                for d in devices
            ])
        want = [golden.expected(case) for case in plan]
        plans = {d.label: (d.handle, (fill or {})[d.label]) for d in devices
                 if d.label in (fill or {})}
        coverage = memfill.Coverage(jax_memory(jax, jnp), plans)
        checksums: dict[str, list[int]] = {d.label: [] for d in devices}
        cases: list[str] = []
        expected: list[int] = []
        start = time.perf_counter()
        while True:
            turn = len(cases) % len(plan)
            pending = [step(*args) for args in operands[turn]]
            coverage.step()
            for device, result in zip(devices, pending, strict=True):
                s0, s1 = (int(x) for x in np.asarray(result))
                checksums[device.label].append(s1 << 32 | s0)
            cases.append(plan[turn].name)
            expected.append(want[turn])
            elapsed = time.perf_counter() - start
            if elapsed >= seconds and len(cases) >= len(plan):
                return SoakRun(checksums, elapsed, size, cases, expected,
                               max(case.nbytes for case in plan), coverage.fills)


def soak_sums(jnp: Any, product: Any, u: Any, v: Any) -> Any:
    """Freivalds' two sums of a soak product (``golden``), in wrapping uint32.

    The product is cast to integers for the sums, which would drop a wrong fraction (a flipped
    low significand bit of 3.0, a zero whose bits became a subnormal that flush-to-zero reads
    as 0) and turn NaN into 0. An exact product's elements are whole numbers whose bits the
    round trip float32 -> int32 -> float32 keeps (but for the sign of a zero), so the count of
    elements whose bits it changes is added to the first sum.
    """
    f = product.astype(jnp.float32)
    i = f.astype(jnp.int32)
    moved = (f.view(jnp.uint32) ^ i.astype(jnp.float32).view(jnp.uint32)) & 0x7FFFFFFF
    off = (moved != 0).sum(dtype=jnp.uint32)
    c = i.astype(jnp.uint32)
    rows = (c * v[None, :]).sum(axis=1, dtype=jnp.uint32)
    return jnp.stack([c.sum(dtype=jnp.uint32) + off, (rows * u).sum(dtype=jnp.uint32)])


def jax_pattern(jnp: Any, count: int, start: Any, seed: Any) -> Any:
    """``memfill``'s pattern for elements start..start+count, in wrapping uint32."""
    index = jnp.arange(count, dtype=jnp.uint32) + start
    return index * jnp.uint32(memfill.MULTIPLIER) + seed


def jax_memory(jax: Any, jnp: Any) -> Backend:
    """The memory coverage's steps: a rewrite donates the block, so XLA writes it in place."""
    import warnings

    import numpy as np

    fresh = jax.jit(lambda start, seed, count: jax_pattern(jnp, count, start, seed),
                    static_argnums=2)
    again = jax.jit(lambda old, start, seed: jax_pattern(jnp, old.shape[0], start, seed),
                    donate_argnums=0)
    read = jax.jit(lambda block: block.sum(dtype=jnp.uint32))

    def scalars(start: int, seed: int, handle: Any) -> tuple[Any, Any]:
        return (jax.device_put(np.uint32(start % memfill.MOD), handle),
                jax.device_put(np.uint32(seed), handle))

    def allocate(handle: Any, start: int, count: int, seed: int) -> Any:
        return fresh(*scalars(start, seed, handle), count)

    def rewrite(block: Any, start: int, seed: int) -> Any:
        [handle] = block.devices()
        with warnings.catch_warnings():  # the CPU client may not reuse donated buffers
            warnings.filterwarnings("ignore", message=".*donated buffers.*")
            return again(block, *scalars(start, seed, handle))

    return Backend(allocate, rewrite, read)


def _capability(device: Any) -> tuple[int, int] | None:
    text = getattr(device, "compute_capability", None)
    if not text:
        return None
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None
