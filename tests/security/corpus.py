"""Generated hostile inputs, one family per function, from a fixed seed.

Each generator returns ``[(case name, bytes)]``: the sizes and shapes vary with the
seed, so a family is many inputs of one kind, not one sample. The numbers are set
so that a reader that builds objects before checking (the code before issue 48)
meets each case's cost: memory in the gigabytes, minutes of time, or a crash.
"""

from __future__ import annotations

import gzip
import io
import pickle
import random
import struct
import tarfile

SEED = 48
BIG_DIGITS = 5000  # past Python's 4300-digit int/str conversion limit


def _rng(salt: int) -> random.Random:
    return random.Random(SEED * 1000 + salt)


# --- sweep specs ---------------------------------------------------------------------------


def spec_family() -> list[tuple[str, bytes]]:
    """Specs whose expansion, nesting, numbers or keys cost a naive reader time or a crash."""
    rng = _rng(1)
    head = "workload: style\n"
    big = "9" * (BIG_DIGITS + rng.randrange(100))
    cases = []
    for depth in (rng.randrange(2_000, 5_000), rng.randrange(50_000, 120_000)):
        cases.append((f"block-sequences-{depth}",
                      head + "vary:\n  learning_rate:\n    " + "- " * depth + "1\n"))
    depth = rng.randrange(400, 600)  # indentation grows with depth: the size cap is 256 KiB
    cases.append((f"block-mappings-{depth}",
                  head + "defaults:\n" + "".join(" " * (i + 1) + f"k{i}:\n" for i in range(depth))))
    for count in (rng.randrange(10**5, 10**6), 10**9, 10**12):
        cases.append((f"linspace-{count}",
                      head + f"vary: {{learning_rate: {{linspace: [1, 2, {count}]}}}}\n"))
    values = rng.randrange(20_000, 30_000)
    cases.append((f"values-{values}", head + "vary:\n  learning_rate: ["
                   + ", ".join(str(i) for i in range(1, values)) + "]\n"))
    cases.append(("grid-product", head + "mode: grid\nvary:\n"
                  + "".join(f"  {name}: {{linspace: [1, 2, 900]}}\n"
                            for name in ("learning_rate", "style_weight", "content_weight"))))
    cases.append(("int-in-list", head + f"vary: {{learning_rate: [{big}]}}\n"))
    wide = big[:400]  # float() of it overflows: a range's start or stop
    cases.append(("int-in-range",
                  head + f"vary: {{learning_rate: {{linspace: [0, {wide}, 3]}}}}\n"))
    cases.append(("int-as-key", head + f"vary: {{learning_rate: [1]}}\n? {big}\n: 1\n"))
    cases.append(("int-range-key",
                  head + f"vary: {{learning_rate: [{{{wide}: [1, 2, 3]}}]}}\n"))
    cases.append(("mixed-top-keys", head + "vary: {learning_rate: [1]}\n1: 2\n"))
    cases.append(("mixed-vary-keys", head + "vary: {learning_rate: [1], 2: [3], null: [4]}\n"))
    cases.append(("null-default-key", head + "defaults: {~: 1}\nvary: {learning_rate: [1]}\n"))
    return [(name, text.encode()) for name, text in cases]


# --- JSON-lines record logs ------------------------------------------------------------------


def records_family() -> list[tuple[str, bytes]]:
    """records.jsonl files of a few MiB whose values would cost hundreds of MiB as objects."""
    rng = _rng(2)
    cases = []
    size = rng.randrange(12, 16) << 20
    one = b'{"workload":"x","a":[' + b"{}," * 200 + b"{}]}\n"
    cases.append((f"empty-dicts-{size >> 20}MiB", one * (size // len(one))))
    one = b'{"workload":"x"}\n'
    cases.append((f"small-records-{size >> 20}MiB", one * (size // len(one))))
    one = b"[" + b"[]," * 1000 + b"[]]\n"
    cases.append((f"empty-lists-{size >> 20}MiB", one * (size // len(one))))
    cases.append((f"ones-{size >> 20}MiB", b"1\n" * (size // 2)))
    one = b'{"workload":"x","a":' + b'{"b":' * 60 + b"1" + b"}" * 60 + b"}\n"
    cases.append((f"nested-dicts-{size >> 20}MiB", one * (size // len(one))))
    cases.append((f"deep-lines-{size >> 20}MiB", (b"[" * 1000 + b"\n") * (size // 1001)))
    return cases


# --- GPU monitor CSVs ---------------------------------------------------------------------


MONITOR_HEADER = ("timestamp,time_s,gpu,name,sm_percent,memory_percent,memory_used_mib,"
                  "memory_total_mib,power_w,temperature_c")


def csv_family() -> list[tuple[str, bytes]]:
    """Monitor CSVs: wide, long, or with cells a float() or plot cannot take."""
    rng = _rng(3)
    good = "2026-12-07T00:00:00Z,{t},0,H100,50,40,1000,80000,300,60"
    cases = []
    width = rng.randrange(200_000, 400_000)
    cases.append((f"wide-header-{width}", ",".join(f"c{i}" for i in range(width)) + "\n"
                  + ",".join("1" for _ in range(width)) + "\n"))
    rows = rng.randrange(1_000_000, 1_500_000)
    cases.append((f"many-short-rows-{rows}", "time_s,gpu\n" + "1,0\n" * rows))
    rows = rng.randrange(50_000, 60_000)
    cases.append((f"not-a-number-at-{rows}", MONITOR_HEADER + "\n"
                  + "\n".join(good.format(t=i) for i in range(rows)) + "\n"
                  + good.format(t="x\x1b[31m") + "\n"))
    for cell in ("nan", "inf", "-1e999", "9" * BIG_DIGITS, "0x10", "\x07\x9b"):
        cases.append((f"cell-{cell[:12]}", MONITOR_HEADER + "\n" + good.format(t=1) + "\n"
                      + good.format(t=cell) + "\n"))
    cases.append(("gpu-index-nan", "time_s,gpu\n1,nan\n"))
    cases.append(("gpu-index-huge", "time_s,gpu\n1,1e300\n"))
    cases.append(("long-cell", "time_s,name\n1," + "n" * 100_000 + "\n"))
    return [(name, text.encode()) for name, text in cases]


# --- CIFAR-10 archives ----------------------------------------------------------------------


def _tar_gz(members: list[tuple[tarfile.TarInfo | bytes, bytes]]) -> bytes:
    """A tar.gz of (header or TarInfo, data) pairs, in order, then the end blocks."""
    raw = io.BytesIO()
    for header, data in members:
        block = header if isinstance(header, bytes) else header.tobuf(tarfile.GNU_FORMAT)
        raw.write(block)
        raw.write(data + bytes(-len(data) % 512))
    raw.write(bytes(1024))
    return gzip.compress(raw.getvalue(), compresslevel=6)


def _pax(records: dict[str, str]) -> bytes:
    """pax extended-header records, each ``"<length> <keyword>=<value>\\n"``."""
    out = b""
    for key, value in records.items():
        body = f" {key}={value}\n".encode()
        length = len(body) + 1
        while len(str(length)) + len(body) != length:
            length += 1
        out += str(length).encode() + body
    return out


def _info(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info


BATCH = "cifar-10-batches-py/data_batch_1"


def _memo_call_pickle(text_size: int, calls: int, long_get: bool) -> bytes:
    """A list of ``calls`` results of ``_codecs.encode(<one memoised str>, "latin1")``.

    Each call is 8 opcode bytes (fetch the callable, fetch the text and the encoding,
    TUPLE2, REDUCE) and makes a fresh ``text_size``-byte bytes object.
    """
    get = (lambda i: b"j" + struct.pack("<I", i)) if long_get else (lambda i: b"h" + bytes([i]))
    text = "\u00e9" * text_size
    out = b"\x80\x02]" + b"X" + struct.pack("<I", len(text.encode())) + text.encode()
    out += b"q\x00" + b"0"  # BINPUT 0, POP: memo indexes from 0, as Python writes them
    out += b"c_codecs\nencode\nq\x01" + b"0"
    out += b"X\x06\x00\x00\x00latin1q\x02" + b"0"
    out += b"(" + (get(1) + get(0) + get(2) + b"\x86R") * calls + b"e."
    return out


def _label_array_pickle(elements: int, dtype: str) -> bytes:
    """A batch dict with one valid row and a label array of ``elements`` values of 1000."""
    import numpy as np

    batch = {b"data": np.zeros((1, 3072), np.uint8),
             b"labels": np.full(elements, 1000, dtype=dtype),
             b"batch_label": b"x", b"filenames": [b"a.png"]}
    return pickle.dumps(batch, protocol=2)


def archive_family() -> list[tuple[str, bytes]]:
    """tar.gz archives whose pickles call from memos, labels run long, or headers hold maps."""
    rng = _rng(4)
    cases = []
    for long_get in (False, True):
        size, calls = rng.randrange(40_000, 70_000), rng.randrange(15_000, 25_000)
        data = _memo_call_pickle(size, calls, long_get)
        cases.append((f"memo-calls-{size}x{calls}", _tar_gz([(_info(BATCH, len(data)), data)])))
    for dtype in ("<i2", "<i4"):
        elements = (rng.randrange(34, 40) << 20) // int(dtype[-1])
        data = _label_array_pickle(elements, dtype)
        cases.append((f"labels-{dtype}-{elements}", _tar_gz([(_info(BATCH, len(data)), data)])))
    # GNU sparse 1.0: the map is in the member's data, its length on its first line.
    entries = 10**9
    sparse_map = f"{entries}\n".encode() + b"0\n" * (rng.randrange(40, 60) << 20 >> 1)
    pax = _pax({"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": BATCH,
                "GNU.sparse.realsize": "1"})
    cases.append(("sparse-1.0-map", _tar_gz([
        (_info("././@PaxHeader", len(pax), tarfile.XHDTYPE), pax),
        (_info(BATCH, len(sparse_map)), sparse_map)])))
    numbers = ",".join("0" for _ in range(rng.randrange(20_000, 30_000)))
    pax = _pax({"GNU.sparse.map": numbers, "GNU.sparse.size": "1"})
    cases.append(("sparse-0.1-map", _tar_gz([
        (_info("././@PaxHeader", len(pax), tarfile.XHDTYPE), pax), (_info(BATCH, 0), b"")])))
    pax = _pax({"uid": "9" * BIG_DIGITS})
    cases.append(("pax-uid-digits", _tar_gz([
        (_info("././@PaxHeader", len(pax), tarfile.XHDTYPE), pax), (_info(BATCH, 0), b"")])))
    old = _info(BATCH, 0, tarfile.GNUTYPE_SPARSE)
    cases.append(("old-gnu-sparse", _tar_gz([(old, b"")])))
    return cases
