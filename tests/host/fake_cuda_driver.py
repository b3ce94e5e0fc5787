"""A CUDA driver module that simulates copies: what the copy-engine tests run against.

It has the names, call signatures and return shape of ``cuda.bindings.driver`` (NVIDIA's
cuda-bindings) that :mod:`workloads.hardware.copy_engine` uses: every call returns a tuple
whose first item is a ``CUresult``, and the enums are cuda-bindings' own (``CUresult``,
``CUstream_flags``, ``CUevent_flags`` imported from the real module, installed here with
the package), never numbers typed here. What a GPU would do is simulated: a copy takes
``bytes / rate`` seconds of "device time", recorded between the two events around it.

The rates are per GPU and pair: ``pinned_gbps`` for host copies from memory allocated by
``cuMemHostAlloc`` (any other host pointer copies at ``pageable_gbps``, so a test can tell
which memory the code used), ``peer_gbps[(source, target)]`` for device-to-device copies
with peer access, ``staged_gbps`` without it; ``peer_factors[(source, target)]`` scales
each successive copy of a pair (an intermittent link: ``[1, 1, 0.3]``), and a pair in
``corrupt`` delivers a word other than the one sent. Device memory holds the 32-bit word
it was filled with (``cuMemsetD32Async``), copies carry it, and ``cuMemcpyDtoH`` writes
it into the real host buffer it is given, so the code's read-back is a real read. The fake
also keeps the bookkeeping a real driver enforces: the current-context stack, retained
primary contexts, and every
allocation, stream and event, so a test can check that all were released.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from cuda.bindings import driver as real

CUresult = real.CUresult
CUstream_flags = real.CUstream_flags
CUevent_flags = real.CUevent_flags
OK = CUresult.CUDA_SUCCESS


@dataclass
class FakeCudaDriver:
    """Module-like: ``CopyEngine(FakeCudaDriver(gpus=2))``."""

    gpus: int = 1
    pinned_gbps: float = 50.0
    pageable_gbps: float = 8.0
    peer_gbps: dict[tuple[int, int], float] = field(default_factory=dict)
    staged_gbps: float = 10.0
    peer_factors: dict[tuple[int, int], list[float]] = field(default_factory=dict)
    corrupt: set[tuple[int, int]] = field(default_factory=set)
    contents: dict[int, int] = field(default_factory=dict)  # device pointer -> fill word
    peer_done: dict[tuple[int, int], int] = field(default_factory=dict)  # copies per pair
    peer_access: set[tuple[int, int]] = field(default_factory=set)
    fail: dict[str, Any] = field(default_factory=dict)  # call name -> CUresult to return
    initialised: bool = False
    context_stack: list[int] = field(default_factory=list)
    retained: dict[int, int] = field(default_factory=dict)
    pinned: dict[int, int] = field(default_factory=dict)  # pointer -> bytes
    device_memory: dict[int, tuple[int, int]] = field(default_factory=dict)  # -> (gpu, bytes)
    streams: set[int] = field(default_factory=set)
    events: dict[int, float] = field(default_factory=dict)  # event -> device time recorded
    peers_enabled: set[tuple[int, int]] = field(default_factory=set)
    copies: list[tuple[str, int]] = field(default_factory=list)  # (kind, bytes)
    CUresult = CUresult
    CUstream_flags = CUstream_flags
    CUevent_flags = CUevent_flags

    def __post_init__(self) -> None:
        self._next = 0x1000
        self._clock: dict[int, float] = {}  # stream -> device time so far

    def _handle(self) -> int:
        self._next += 0x100
        return self._next

    def _failing(self, name: str) -> tuple[Any, ...] | None:
        return (self.fail[name],) if name in self.fail else None

    # --- initialisation and devices -----------------------------------------------------

    def cuInit(self, flags: int) -> tuple[Any]:
        self.initialised = True
        return self._failing("cuInit") or (OK,)

    def cuDeviceGetCount(self) -> tuple[Any, int]:
        return OK, self.gpus

    def cuDeviceGet(self, ordinal: int) -> tuple[Any, int]:
        if not 0 <= ordinal < self.gpus:
            return CUresult.CUDA_ERROR_INVALID_DEVICE, 0
        return OK, ordinal

    def cuDeviceCanAccessPeer(self, device: int, peer: int) -> tuple[Any, int]:
        return OK, int((peer, device) in self.peer_access)

    def cuGetErrorName(self, result: Any) -> tuple[Any, bytes]:
        return OK, result.name.encode()

    # --- contexts -------------------------------------------------------------------------

    def cuDevicePrimaryCtxRetain(self, device: int) -> tuple[Any, int]:
        self.retained[device] = self.retained.get(device, 0) + 1
        return OK, 0xC0 + device

    def cuDevicePrimaryCtxRelease(self, device: int) -> tuple[Any]:
        self.retained[device] -= 1
        return (OK,)

    def cuCtxPushCurrent(self, context: int) -> tuple[Any]:
        self.context_stack.append(context)
        return (OK,)

    def cuCtxPopCurrent(self) -> tuple[Any, int]:
        return OK, self.context_stack.pop()

    def _gpu(self) -> int:
        return self.context_stack[-1] - 0xC0

    def cuCtxEnablePeerAccess(self, peer_context: int, flags: int) -> tuple[Any]:
        pair = (peer_context - 0xC0, self._gpu())
        if pair in self.peers_enabled:
            return (CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,)
        self.peers_enabled.add(pair)
        return (OK,)

    # --- memory ---------------------------------------------------------------------------

    def cuMemHostAlloc(self, nbytes: int, flags: int) -> tuple[Any, int]:
        pointer = self._handle()
        self.pinned[pointer] = nbytes
        return OK, pointer

    def cuMemFreeHost(self, pointer: int) -> tuple[Any]:
        del self.pinned[pointer]
        return (OK,)

    def cuMemAlloc(self, nbytes: int) -> tuple[Any, int]:
        if failing := self._failing("cuMemAlloc"):
            return (*failing, 0)
        pointer = self._handle()
        self.device_memory[pointer] = (self._gpu(), nbytes)
        return OK, pointer

    def cuMemFree(self, pointer: int) -> tuple[Any]:
        del self.device_memory[pointer]
        self.contents.pop(pointer, None)
        return (OK,)

    # --- streams, events and copies -------------------------------------------------------

    def cuStreamCreate(self, flags: Any) -> tuple[Any, int]:
        stream = self._handle()
        self.streams.add(stream)
        self._clock[stream] = 0.0
        return OK, stream

    def cuStreamDestroy(self, stream: int) -> tuple[Any]:
        self.streams.remove(stream)
        return (OK,)

    def cuStreamSynchronize(self, stream: int) -> tuple[Any]:
        return (OK,)

    def cuEventCreate(self, flags: Any) -> tuple[Any, int]:
        event = self._handle()
        self.events[event] = 0.0
        return OK, event

    def cuEventDestroy(self, event: int) -> tuple[Any]:
        del self.events[event]
        return (OK,)

    def cuEventRecord(self, event: int, stream: int) -> tuple[Any]:
        self.events[event] = self._clock[stream]
        return (OK,)

    def cuEventSynchronize(self, event: int) -> tuple[Any]:
        return (OK,)

    def cuEventElapsedTime(self, start: int, stop: int) -> tuple[Any, float]:
        return OK, (self.events[stop] - self.events[start]) * 1e3

    def _copy(self, stream: int, kind: str, nbytes: int, gbps: float) -> tuple[Any]:
        self.copies.append((kind, nbytes))
        self._clock[stream] += nbytes / (gbps * 1e9)
        return (OK,)

    def cuMemcpyHtoDAsync(self, device: int, host: Any, nbytes: int, stream: int) -> tuple[Any]:
        assert self.device_memory[device][1] >= nbytes
        gbps = self.pinned_gbps if host in self.pinned else self.pageable_gbps
        return self._copy(stream, "HtoD", nbytes, gbps)

    def cuMemcpyDtoHAsync(self, host: Any, device: int, nbytes: int, stream: int) -> tuple[Any]:
        assert self.device_memory[device][1] >= nbytes
        gbps = self.pinned_gbps if host in self.pinned else self.pageable_gbps
        return self._copy(stream, "DtoH", nbytes, gbps)

    def cuMemcpyPeerAsync(
        self, dst: int, dst_ctx: int, src: int, src_ctx: int, nbytes: int, stream: int
    ) -> tuple[Any]:
        pair = (src_ctx - 0xC0, dst_ctx - 0xC0)
        assert self.device_memory[src][0] == pair[0] and self.device_memory[dst][0] == pair[1]
        direct = pair in self.peers_enabled
        gbps = self.peer_gbps.get(pair, self.staged_gbps) if direct else self.staged_gbps
        done = self.peer_done.get(pair, 0)
        self.peer_done[pair] = done + 1
        factors = self.peer_factors.get(pair, [])
        gbps *= factors[done] if done < len(factors) else 1.0
        sent = self.contents.get(src, 0)
        self.contents[dst] = sent ^ 1 if pair in self.corrupt else sent
        return self._copy(stream, "peer", nbytes, gbps)

    def cuMemsetD32Async(self, pointer: int, word: int, count: int, stream: int) -> tuple[Any]:
        assert self.device_memory[pointer][1] >= count * 4
        self.contents[pointer] = word
        return (OK,)

    def cuMemcpyDtoH(self, host: int, device: int, nbytes: int) -> tuple[Any]:
        assert self.device_memory[device][1] >= nbytes and host not in self.pinned
        words = np.full(nbytes // 4, self.contents.get(device, 0), dtype=np.uint32)
        ctypes.memmove(host, words.ctypes.data, words.nbytes)  # a real write into the buffer
        return (OK,)

    def released(self) -> bool:
        """Everything the code took was given back: contexts, memory, streams, events."""
        return (
            not self.context_stack
            and not any(self.retained.values())
            and not self.pinned
            and not self.device_memory
            and not self.streams
            and not self.events
        )
