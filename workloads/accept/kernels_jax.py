"""The JAX layer of the battery: ``jax.default_device``, ``jax.jit``, ``shard_map`` + ``psum``.

Without an accelerator, the host platform is split into several devices by
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (set by the command before
JAX starts), so the all-reduce runs across ranks there too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

from workloads.accept.kernels import Device, best_rate

FLOAT32_BYTES = 4
PRECISION = {"float32": "float32", "tensorfloat32": "tensorfloat32"}


class JaxKernels:
    backend = "jax"

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
        import numpy as np

        jax = self.jax
        host = np.ones(nbytes // FLOAT32_BYTES, dtype=np.float32)
        on_device = jax.device_put(host, device.handle)
        fresh_copy = jax.jit(lambda v: v + 0.0)
        rates = []
        for attempt in range(repeats + 1):  # the first is a warm-up
            if to_device:
                rate = best_rate(
                    lambda: jax.device_put(host, device.handle).block_until_ready, nbytes, 1
                )
            else:
                fresh = fresh_copy(on_device).block_until_ready()  # nothing cached on the host
                rate = best_rate(partial(_fetch, fresh), nbytes, 1)
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


def _capability(device: Any) -> tuple[int, int] | None:
    text = getattr(device, "compute_capability", None)
    if not text:
        return None
    try:
        major, minor = str(text).split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _fetch(array: Any) -> Callable[[], None]:
    import numpy as np

    np.asarray(array)
    return lambda: None
