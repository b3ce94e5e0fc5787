"""Walk a pickle's opcodes before unpickling it: refuse what would cost more than its size.

Why: Python's C unpickler trusts the numbers a stream gives it. A ``LONG_BINPUT``
opcode stores into the memo at any 32-bit index, and the unpickler first grows its
memo table to hold that index: a 9-byte pickle (``\\x80\\x02N r <u32> .``) asks for
16 bytes per index, 32 GiB at index 2**31, before anything can refuse it. The
allocation happens inside ``load()``, so no check after it helps.

So a stream is read once by :func:`pickletools.genops` (the standard library's
opcode reader, which decodes each argument without running anything) and refused
(:class:`UnsafePickle`, one line) unless:

* it has at most ``limits.opcodes`` opcodes, and ends with STOP and nothing after;
* every memo index it stores or fetches is below the number of memo stores in the
  stream (Python writes them 0, 1, 2, ... as it goes, so a real pickle always
  passes): the memo table then holds at most one slot per store, 16 bytes per
  opcode at most;
* its MARKs nest at most ``limits.depth`` deep;
* dict and set items number at most ``limits.hashed_items`` (a dict built from
  integer keys that all hash alike costs quadratic time; ``None``: no cap, for a
  trusted file);
* it asks for no out-of-band buffers and no persistent IDs;
* what its calls may make stays under ``limits.produced_bytes`` (``None``: no cap).

That last one is because a memo fetch (``GET``) pushes a reference, not a copy:
one memoised argument of a few kilobytes, passed to an allow-listed callable a
hundred thousand times (``_codecs.encode`` of the same text), makes a new object
each time from a stream of a few bytes a call. So the walk keeps, for each item
on the simulated stack, the bytes it stands for (a string its length, a container
the sum of what it holds, a memo fetch what was stored) and charges every call
(``REDUCE``, ``NEWOBJ``, ``OBJ``, ``INST``, ``BUILD``) the bytes of its arguments,
as if it copied them: the callables a reader allows (NumPy's reconstruction,
``_codecs.encode``) make at most that.

Every other allocation of the C unpickler is bounded by the bytes it reads (a
container holds what the stream pushed, a string is as long as its bytes), so an
accepted stream costs memory linear in its size plus what its calls are charged,
and the walk itself time linear in it. The walk does not judge what the pickle
calls: that is for the caller's ``find_class`` (an allow-list) or the file's trust.
"""

from __future__ import annotations

import io
import pickletools
from dataclasses import dataclass

from workloads.errors import brief, clip

_MEMO_STORES = {"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}
_MEMO_FETCHES = {"GET", "BINGET", "LONG_BINGET"}
_REFUSED = {
    "NEXT_BUFFER": "asks for an out-of-band buffer",
    "READONLY_BUFFER": "asks for an out-of-band buffer",
    "PERSID": "holds a persistent ID",
    "BINPERSID": "holds a persistent ID",
}
# Opcodes that add items to a dict or set: the stack items they take are key/value pairs
# (SETITEM, SETITEMS) or elements (ADDITEMS, FROZENSET).
_PAIRS = {"SETITEM", "SETITEMS", "DICT"}
_ELEMENTS = {"ADDITEMS", "FROZENSET"}
_CALLS = {"REDUCE", "NEWOBJ", "NEWOBJ_EX", "OBJ", "INST", "BUILD"}
_WEIGHT_CEILING = 1 << 62  # weights are clamped here: nested references never make bignums


class UnsafePickle(ValueError):
    """The stream is not a pickle this reader will load; the message is one line."""


@dataclass(frozen=True)
class PickleLimits:
    """What one stream may hold; each a generous multiple of the real file's figure."""

    opcodes: int
    depth: int = 64
    hashed_items: int | None = None
    produced_bytes: int | None = None


@dataclass(frozen=True)
class PickleShape:
    """What the walk counted (the tests and benchmarks read it)."""

    opcodes: int
    memo_stores: int
    depth: int
    hashed_items: int
    calls: int = 0
    produced_bytes: int = 0


def check_pickle(data: bytes, limits: PickleLimits) -> PickleShape:
    """Walk ``data``'s opcodes; :class:`UnsafePickle` unless it fits ``limits`` (see module)."""
    walk = _Walk(limits)
    stream = io.BytesIO(data)
    try:
        for opcode, arg, _position in pickletools.genops(stream):
            walk.step(opcode, arg)
    except UnsafePickle:
        raise
    except Exception as exc:  # genops on bytes it cannot read: truncated, unknown opcode, ...
        raise UnsafePickle(f"is not a readable pickle ({clip(str(exc), 60) or type(exc).__name__})"
                           ) from None
    if not walk.stopped:
        raise UnsafePickle("ends without a STOP opcode")
    if stream.tell() != len(data):
        raise UnsafePickle(f"has {len(data) - stream.tell()} bytes after its STOP opcode")
    if walk.highest_index >= walk.memo_stores:
        raise UnsafePickle(
            f"uses memo index {brief(walk.highest_index)} with only {walk.memo_stores} memo stores"
        )
    return PickleShape(walk.opcodes, walk.memo_stores, walk.deepest, walk.hashed, walk.calls,
                       walk.produced)


class _Walk:
    """The unpickler's stack as weights (bytes each item stands for), opcode by opcode."""

    def __init__(self, limits: PickleLimits) -> None:
        self.limits = limits
        self.opcodes = self.memo_stores = self.hashed = self.calls = self.produced = 0
        self.highest_index = -1
        self.deepest = 0
        self.stopped = False
        self.stack: list[int] = []  # one weight per stack item
        self.marks: list[int] = []  # the stack height at each open MARK
        self.memo: dict[int, int] = {}  # memo index -> weight stored there

    def step(self, opcode: pickletools.OpcodeInfo, arg: object) -> None:
        limits = self.limits
        self.opcodes += 1
        if self.opcodes > limits.opcodes:
            raise UnsafePickle(f"holds more than {limits.opcodes} opcodes")
        name = opcode.name
        if name in _REFUSED:
            raise UnsafePickle(_REFUSED[name])
        if name == "MARK":
            self.marks.append(len(self.stack))
            self.deepest = max(self.deepest, len(self.marks))
            if len(self.marks) > limits.depth:
                raise UnsafePickle(f"nests more than {limits.depth} marks deep")
            return
        taken = self._pop(opcode, name)
        weight = min(sum(taken), _WEIGHT_CEILING)
        if name in _MEMO_STORES:
            self._store(name, arg)
        elif name in _MEMO_FETCHES:
            index = _index(arg)
            self.highest_index = max(self.highest_index, index)
            weight = self.memo.get(index, 0)
        elif name in _CALLS:
            self._charge(name, weight)
        elif isinstance(arg, str | bytes | bytearray):
            weight = len(arg) + 1
        elif not taken:
            weight = 1
        if name in _PAIRS:
            self.hashed += len(taken) // 2 if name != "SETITEM" else 1
        elif name in _ELEMENTS:
            self.hashed += len(taken) - (name == "ADDITEMS")  # not the set itself
        if limits.hashed_items is not None and self.hashed > limits.hashed_items:
            raise UnsafePickle(f"holds more than {limits.hashed_items} dict or set items")
        if name == "DUP":
            self.stack += taken + taken
            return
        self.stack += [weight] * len(opcode.stack_after)
        if name == "STOP":
            self.stopped = True

    def _pop(self, opcode: pickletools.OpcodeInfo, name: str) -> list[int]:
        """Take what ``opcode`` consumes off the stack (through its MARK, if it takes one)."""
        before = opcode.stack_before
        if pickletools.markobject in before:
            if not self.marks:
                raise UnsafePickle(f"uses {name} without a MARK")
            start = self.marks.pop() - before.index(pickletools.markobject)
        else:
            start = len(self.stack) - len(before)
        if start < 0:
            raise UnsafePickle(f"pops an empty stack at {name}")
        taken = self.stack[start:]
        del self.stack[start:]
        return taken

    def _store(self, name: str, arg: object) -> None:
        """PUT/MEMOIZE: the top item's weight under its memo index (it stays on the stack)."""
        self.memo_stores += 1
        if name == "MEMOIZE":
            index = len(self.memo)
        else:
            index = _index(arg)
            self.highest_index = max(self.highest_index, index)
        if self.stack:
            self.memo[index] = self.stack[-1]

    def _charge(self, name: str, weight: int) -> None:
        """A call makes an object: charge it the bytes of its arguments (see module)."""
        self.calls += 1
        self.produced = min(self.produced + weight, _WEIGHT_CEILING)
        cap = self.limits.produced_bytes
        if cap is not None and self.produced > cap:
            raise UnsafePickle(
                f"makes more than {cap} bytes through its calls ({self.calls} calls; a memoised "
                "argument passed again and again)"
            )


def _index(arg: object) -> int:
    if not isinstance(arg, int):  # PUT/GET carry a decimal text index, decoded by genops
        raise UnsafePickle(f"has a memo index that is not a number ({brief(arg)})")
    if arg < 0:
        raise UnsafePickle(f"has a negative memo index ({brief(arg)})")
    return arg
