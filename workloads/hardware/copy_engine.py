"""Copy bandwidth as the hardware moves it: the CUDA driver API, through NVIDIA's cuda-bindings.

What nvbandwidth's copy-engine tests measure (``host_to_device_memcpy_ce``,
``device_to_host_memcpy_ce``, ``device_to_device_memcpy_read_ce``): a buffer of page-locked
host memory (``cuMemHostAlloc``) or device memory (``cuMemAlloc``) copied by the GPU's copy
engines on a stream (``cuMemcpyHtoDAsync``, ``cuMemcpyDtoHAsync``, ``cuMemcpyPeerAsync``),
timed by CUDA events recorded on that stream, so the figure is the copy's own time and not
the host's. A framework's own copies from a NumPy array start from pageable memory, which
the driver stages through a pinned buffer of its own: on an H200 at PCIe Gen5 x16 that
measured 8.1 / 1.5 GB/s against 54.8 / 54.7 pinned, a figure of the framework's path, not
of the link.

The same code serves TensorFlow and JAX processes: both work in each GPU's primary context,
which this module retains (and releases) rather than creating contexts of its own. The
driver module is a parameter (``cuda.bindings.driver`` in production; the tests pass a
stand-in with its names, ``tests/host/fake_cuda_driver.py``). A failed call raises
:class:`CopyEngineError` naming the call and NVIDIA's name of its ``CUresult``.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

# The word each pair's source buffer is filled with before its copies, then looked for in
# every word of the destination: copied bytes that differ are a link corrupting data.
PATTERN = 0x5A5A0000


@dataclass(frozen=True)
class PeerCopy:
    """One ordered pair's copies, as nvbandwidth reports them: the median of the repetitions.

    ``slowest`` is the slowest repetition (an intermittent link shows there, not in the
    median); ``verified``: every copied word arrived as sent (None: not checked, a
    framework copy that gives no buffer to read); ``direct``: peer access (None: unknown).
    """

    rate: float  # median bytes/s
    direct: bool | None
    slowest: float
    verified: bool | None
    repeats: int


def median_copy(rates: list[float], direct: bool | None, verified: bool | None) -> PeerCopy:
    """A :class:`PeerCopy` from each repetition's bytes/s."""
    kept = [r for r in rates if r > 0] or [0.0]
    return PeerCopy(statistics.median(kept), direct, min(kept), verified, len(rates))


class CopyEngineError(Exception):
    """A CUDA driver call failed: the call and the ``CUresult`` name, e.g. ``CUDA_ERROR_...``."""


def open_driver(driver: Any = None) -> Any | None:
    """``cuda.bindings.driver`` initialised (``cuInit``), or None where there is none to use.

    None without cuda-bindings, without an NVIDIA driver (cuda-bindings raises when it
    cannot load ``libcuda``), or with no device.
    """
    if driver is None:
        try:
            from cuda.bindings import driver as imported
        except ImportError:
            return None
        driver = imported
    try:
        (result,) = driver.cuInit(0)
        if result != driver.CUresult.CUDA_SUCCESS:
            return None
        result, count = driver.cuDeviceGetCount()
    except Exception:  # cuda.pathfinder's DynamicLibNotFoundError: no driver library
        return None
    if result != driver.CUresult.CUDA_SUCCESS or not count:
        return None
    return driver


@cache
def process_engine() -> CopyEngine | None:
    """This process's engine over the real driver, opened once; None where there is none."""
    driver = open_driver()
    return CopyEngine(driver) if driver is not None else None


class CopyEngine:
    """Host↔device and device↔device copy rates of the GPUs the CUDA driver numbers 0…n-1.

    The ordinals are this process's (after ``CUDA_VISIBLE_DEVICES``), the numbering
    TensorFlow and JAX give their GPUs too.
    """

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    # --- the measurements ---------------------------------------------------------------

    def host_to_device(self, ordinal: int, nbytes: int, repeats: int) -> float:
        """Best bytes/s of ``repeats`` copies of ``nbytes`` from pinned host memory."""
        return self._host_copy(ordinal, nbytes, repeats, to_device=True)

    def device_to_host(self, ordinal: int, nbytes: int, repeats: int) -> float:
        """Best bytes/s of ``repeats`` copies of ``nbytes`` into pinned host memory."""
        return self._host_copy(ordinal, nbytes, repeats, to_device=False)

    def _host_copy(self, ordinal: int, nbytes: int, repeats: int, *, to_device: bool) -> float:
        with (
            self._context(ordinal),
            self._pinned(nbytes) as host,
            self._device_buffer(nbytes) as device,
            self._stream() as stream,
        ):
            if to_device:
                return self._best(
                    stream, nbytes, repeats,
                    lambda: self._call("cuMemcpyHtoDAsync", device, host, nbytes, stream),
                )
            return self._best(
                stream, nbytes, repeats,
                lambda: self._call("cuMemcpyDtoHAsync", host, device, nbytes, stream),
            )

    def peer(self, source: int, target: int, nbytes: int, repeats: int) -> PeerCopy:
        """Copies from GPU ``source`` to GPU ``target``: the median of ``repeats``, verified.

        Peer access is enabled where the driver allows it (NVLink, or PCIe peer-to-peer),
        as nvbandwidth does; without it the driver stages the copy through host memory,
        and the figure says so. The source is filled with a word that names the pair
        (``cuMemsetD32Async``) and, after the copies, every word of the destination is
        read back and compared: a copy that arrives corrupted is not a bandwidth.
        """
        direct = bool(self._call("cuDeviceCanAccessPeer", self._device(target),
                                 self._device(source))[0])
        word = PATTERN | (source & 0xFF) << 8 | (target & 0xFF)
        # The source's buffer in its context; the destination, the stream and the copy in
        # the target's, which (with peer access) reads the source's memory directly.
        with (
            self._context(source) as source_ctx,
            self._device_buffer(nbytes) as src,
            self._context(target) as target_ctx,
            self._device_buffer(nbytes) as dst,
            self._stream() as stream,
        ):
            if direct:
                self._enable_peer_access(source_ctx)
            self._call("cuMemsetD32Async", src, word, nbytes // 4, stream)
            rates = self._rates(
                stream, nbytes, repeats,
                lambda: self._call(
                    "cuMemcpyPeerAsync", dst, target_ctx, src, source_ctx, nbytes, stream
                ),
            )
            self._call("cuStreamSynchronize", stream)
            return median_copy(rates, direct, self._holds(dst, nbytes, word))

    def _holds(self, pointer: Any, nbytes: int, word: int) -> bool:
        """Whether every 32-bit word of the device buffer is ``word`` (read back to the host)."""
        host = np.empty(nbytes // 4, dtype=np.uint32)
        self._call("cuMemcpyDtoH", host.ctypes.data, pointer, host.nbytes)
        return bool((host == word).all())

    # --- driver plumbing ----------------------------------------------------------------

    def _call(self, name: str, *args: Any) -> tuple[Any, ...]:
        """``driver.<name>(*args)``: the values after its ``CUresult``; an error raises."""
        cu = self.driver
        result, *values = getattr(cu, name)(*args)
        if result != cu.CUresult.CUDA_SUCCESS:
            raise CopyEngineError(f"{name}: {self._error_name(result)}")
        return tuple(values)

    def _error_name(self, result: Any) -> str:
        try:
            status, name = self.driver.cuGetErrorName(result)
            if status == self.driver.CUresult.CUDA_SUCCESS:
                return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:  # a name we cannot read must not hide the failure itself
            pass
        return str(result)

    def _device(self, ordinal: int) -> Any:
        return self._call("cuDeviceGet", ordinal)[0]

    @contextlib.contextmanager
    def _context(self, ordinal: int) -> Iterator[Any]:
        """The device's primary context, current for the block (the frameworks' own)."""
        device = self._device(ordinal)
        (context,) = self._call("cuDevicePrimaryCtxRetain", device)
        try:
            self._call("cuCtxPushCurrent", context)
            try:
                yield context
            finally:
                self._call("cuCtxPopCurrent")
        finally:
            self._call("cuDevicePrimaryCtxRelease", device)

    @contextlib.contextmanager
    def _pinned(self, nbytes: int) -> Iterator[Any]:
        (pointer,) = self._call("cuMemHostAlloc", nbytes, 0)
        try:
            yield pointer
        finally:
            self._call("cuMemFreeHost", pointer)

    @contextlib.contextmanager
    def _device_buffer(self, nbytes: int) -> Iterator[Any]:
        (pointer,) = self._call("cuMemAlloc", nbytes)
        try:
            yield pointer
        finally:
            self._call("cuMemFree", pointer)

    @contextlib.contextmanager
    def _stream(self) -> Iterator[Any]:
        cu = self.driver
        (stream,) = self._call("cuStreamCreate", cu.CUstream_flags.CU_STREAM_NON_BLOCKING)
        try:
            yield stream
        finally:
            self._call("cuStreamDestroy", stream)

    def _enable_peer_access(self, peer_context: Any) -> None:
        cu = self.driver
        (result,) = cu.cuCtxEnablePeerAccess(peer_context, 0)
        if result not in (
            cu.CUresult.CUDA_SUCCESS,
            cu.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
        ):
            raise CopyEngineError(f"cuCtxEnablePeerAccess: {self._error_name(result)}")

    def _best(self, stream: Any, nbytes: int, repeats: int, copy: Callable[[], Any]) -> float:
        """Best bytes/s over ``repeats`` copies (the host copies' figure)."""
        return max(self._rates(stream, nbytes, repeats, copy))

    def _rates(
        self, stream: Any, nbytes: int, repeats: int, copy: Callable[[], Any]
    ) -> list[float]:
        """Bytes/s of each of ``repeats`` copies, each timed by events on ``stream``.

        One copy first, untimed: the first use of a buffer maps its pages.
        """
        cu = self.driver
        flags = cu.CUevent_flags.CU_EVENT_DEFAULT
        (start,) = self._call("cuEventCreate", flags)
        (stop,) = self._call("cuEventCreate", flags)
        try:
            copy()
            self._call("cuStreamSynchronize", stream)
            rates = []
            for _ in range(max(1, repeats)):
                self._call("cuEventRecord", start, stream)
                copy()
                self._call("cuEventRecord", stop, stream)
                self._call("cuEventSynchronize", stop)
                (milliseconds,) = self._call("cuEventElapsedTime", start, stop)
                rates.append(nbytes / (milliseconds / 1e3) if milliseconds > 0 else 0.0)
            return rates
        finally:
            self._call("cuEventDestroy", start)
            self._call("cuEventDestroy", stop)
