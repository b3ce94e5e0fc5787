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
* it asks for no out-of-band buffers and no persistent IDs.

Every other allocation of the C unpickler is bounded by the bytes it reads (a
container holds what the stream pushed, a string is as long as its bytes), so an
accepted stream costs memory linear in its size, and the walk itself time linear
in it. The walk does not judge what the pickle calls: that is for the caller's
``find_class`` (an allow-list) or the file's trust.
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


class UnsafePickle(ValueError):
    """The stream is not a pickle this reader will load; the message is one line."""


@dataclass(frozen=True)
class PickleLimits:
    """What one stream may hold; each a generous multiple of the real file's figure."""

    opcodes: int
    depth: int = 64
    hashed_items: int | None = None


@dataclass(frozen=True)
class PickleShape:
    """What the walk counted (the tests and benchmarks read it)."""

    opcodes: int
    memo_stores: int
    depth: int
    hashed_items: int


def check_pickle(data: bytes, limits: PickleLimits) -> PickleShape:
    """Walk ``data``'s opcodes; :class:`UnsafePickle` unless it fits ``limits`` (see module)."""
    stream = io.BytesIO(data)
    opcodes = memo_stores = hashed = 0
    highest_index = -1
    height = 0  # the unpickler's stack height after each opcode
    marks: list[int] = []  # the stack height at each open MARK
    deepest = 0
    stopped = False
    try:
        for opcode, arg, _position in pickletools.genops(stream):
            opcodes += 1
            if opcodes > limits.opcodes:
                raise UnsafePickle(f"holds more than {limits.opcodes} opcodes")
            name = opcode.name
            if name in _REFUSED:
                raise UnsafePickle(_REFUSED[name])
            if name in _MEMO_STORES:
                memo_stores += 1
                if name != "MEMOIZE":
                    highest_index = max(highest_index, _index(arg))
            elif name in _MEMO_FETCHES:
                highest_index = max(highest_index, _index(arg))
            if name == "MARK":
                marks.append(height)
                deepest = max(deepest, len(marks))
                if len(marks) > limits.depth:
                    raise UnsafePickle(f"nests more than {limits.depth} marks deep")
                continue
            before = opcode.stack_before
            if pickletools.markobject in before:
                if not marks:
                    raise UnsafePickle(f"uses {name} without a MARK")
                mark_height = marks.pop()
                taken = height - mark_height
                below = before.index(pickletools.markobject)
                height = mark_height - below + len(opcode.stack_after)
            else:
                taken = len(before)
                height = height - len(before) + len(opcode.stack_after)
            if height < 0:
                raise UnsafePickle(f"pops an empty stack at {name}")
            if name in _PAIRS:
                hashed += taken // 2 if name != "SETITEM" else 1
            elif name in _ELEMENTS:
                hashed += taken
            if limits.hashed_items is not None and hashed > limits.hashed_items:
                raise UnsafePickle(f"holds more than {limits.hashed_items} dict or set items")
            if name == "STOP":
                stopped = True
    except UnsafePickle:
        raise
    except Exception as exc:  # genops on bytes it cannot read: truncated, unknown opcode, ...
        raise UnsafePickle(f"is not a readable pickle ({clip(str(exc), 60) or type(exc).__name__})"
                           ) from None
    if not stopped:
        raise UnsafePickle("ends without a STOP opcode")
    if stream.tell() != len(data):
        raise UnsafePickle(f"has {len(data) - stream.tell()} bytes after its STOP opcode")
    if highest_index >= memo_stores:
        raise UnsafePickle(
            f"uses memo index {brief(highest_index)} with only {memo_stores} memo stores"
        )
    return PickleShape(opcodes, memo_stores, deepest, hashed)


def _index(arg: object) -> int:
    if not isinstance(arg, int):  # PUT/GET carry a decimal text index, decoded by genops
        raise UnsafePickle(f"has a memo index that is not a number ({brief(arg)})")
    if arg < 0:
        raise UnsafePickle(f"has a negative memo index ({brief(arg)})")
    return arg
