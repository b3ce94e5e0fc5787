"""Reading files from outside in bounded memory and time: a size cap, then a checked parse.

Why: a record, a log, a spec or a fleet's ``<host>.json`` may come from another
host, another user or a broken disk, and Python's parsers trust their input's
shape. ``json.loads`` recurses once per ``[``, so ten thousand of them end in a
``RecursionError`` (not a ``JSONDecodeError``: a traceback), and a 5000-digit
number in an int field raises ``ValueError`` from ``int``. YAML's aliases let a
few hundred bytes stand for a billion nodes once anything walks the result. So
every reader here:

* opens the path itself, never a link's target (``O_NOFOLLOW``), without waiting
  on a FIFO or a device (``O_NONBLOCK``), and reads only a regular file
  (:func:`open_untrusted`): a FIFO given as a record or a spec would otherwise
  block for ever, and a planted link read another user's file;
* refuses a file over its cap from ``fstat``, before reading a byte, and reads at
  most cap + 1 bytes (a file that grows meanwhile is still refused);
* counts the values a JSON text can make on its bytes (one C-speed ``count`` per
  delimiter) before ``json.loads`` builds any of them (:data:`JSON_VALUES_MAX`);
* walks a YAML text's event stream (libyaml's parser keeps its own stack, no
  recursion) and stops at :data:`YAML_DEPTH_MAX` or :data:`YAML_EVENTS_MAX` before
  the composer, which recurses once per level in C (100,000 nested block
  sequences overflow the C stack: SIGSEGV), builds a node;
* reads a CSV table with its rows, columns and cells counted as they are split
  (:func:`read_csv_table`);
* checks the text before the parser sees it: JSON nesting (one pass over the
  bytes, strings skipped), number lengths (``parse_int``/``parse_float`` refuse
  more than :data:`NUMBER_CHARS_MAX` characters), YAML flow nesting (PyYAML's
  scanner is quadratic in it), then YAML depth, aliases and node count on the
  composed node graph, before anything is constructed;
* turns every failure into :class:`BadInput` (a ``ValueError``), whose message is
  one line: callers add the file's name and the fix.

The bound, for a file of ``n`` bytes under its cap: time linear in ``n`` (for YAML
about a second per 100 kB with libyaml, ten with pure-Python PyYAML: hence a spec's
256 KiB cap); memory at most about 80 times ``n`` for JSON (an empty ``{}`` costs
CPython 64 bytes; the text itself, decoded, ``n``), and for YAML the node graph
PyYAML composes (a few hundred bytes a node; aliases are counted, never expanded).
"""

from __future__ import annotations

import csv
import errno
import functools
import hashlib
import io
import json
import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workloads.errors import brief, clip

if TYPE_CHECKING:
    import yaml

JSON_DEPTH_MAX = 64  # a record nests 4 deep; JSON's C scanner recurses per level
NUMBER_CHARS_MAX = 100  # a float's 17 digits, an exponent, a sign: far below this
YAML_DEPTH_MAX = 32
YAML_NODES_MAX = 100_000  # nodes after counting every alias as a copy (a spec has hundreds)
YAML_EVENTS_MAX = 200_000  # parser events (about two a node) before anything is composed
# JSON values a document or a log may make, counted on the bytes (see json_values): at
# most about 72 bytes of Python objects each (an empty dict and its slot), so 1,000,000 of
# them cost at most about 70 MiB. A record holds hundreds; a loss history, tens of thousands.
JSON_VALUES_MAX = 1_000_000
REPORT_VALUES_MAX = 2_000_000  # all the files of one report together: about 140 MiB
RECORD_MAX_BYTES = 16 << 20  # a record is a few kB; one with a long loss history, a few MB
LOG_MAX_BYTES = 64 << 20  # records.jsonl: its bytes, then its lines, are held at once
SPEC_MAX_BYTES = 256 << 10  # a sweep spec is under 10 kB
CSV_MAX_BYTES = 32 << 20  # a GPU monitor CSV: ~80 bytes a row, 8 GPUs at 1 Hz for 12 hours
CSV_ROWS_MAX = 400_000  # that many rows
CSV_COLUMNS_MAX = 64  # the monitor writes 10
CSV_CELL_MAX = 256  # a timestamp or a GPU name; numbers are held to NUMBER_CHARS_MAX
# An image's declared size, checked before a pixel is decoded: 4096 x 4096. Pillow keeps
# four bytes a pixel (64 MiB), its RGB copy as many, the NumPy array three (48 MiB): the
# 256 MiB a hostile input may cost. Pillow's own guard (89 M pixels) only warns below
# twice that, where a 165 KB PNG decodes to 1.8 GB.
IMAGE_PIXELS_MAX = 4096 * 4096
IMAGE_MAX_BYTES = 64 << 20  # a 4096 x 4096 RGB PNG of noise is 48 MiB
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class BadInput(ValueError):
    """The file is over its cap or not what its reader accepts; the message is one line."""


class NotAFile(BadInput):
    """The path is a link, a FIFO, a socket or a device: never opened through, never read."""


def open_untrusted(path: Path, limit: int | None = None) -> int:
    """A read-only descriptor of the regular file ``path`` (at most ``limit`` bytes).

    The one way this project opens a file that came from outside: ``O_NOFOLLOW``
    (a link in the last component is refused, :class:`BadInput`), ``O_NONBLOCK``
    (opening a FIFO or a tty returns at once instead of waiting for a writer), then
    ``fstat`` on the descriptor: anything but a regular file is refused, a folder
    as ``IsADirectoryError`` (callers word that one themselves). Other
    ``OSError`` (missing, unreadable) passes through.
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotAFile("is a symbolic link (only a file itself is read)") from None
        raise
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile("is not a regular file (a FIFO, socket or device)")
        if limit is not None and info.st_size > limit:
            raise BadInput(f"is {info.st_size} bytes, over the {limit} this reader accepts")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_capped(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` (:func:`open_untrusted`), refused before reading if over ``limit``.

    ``OSError`` (missing, unreadable) passes through: callers word those themselves.
    """
    with open(open_untrusted(path, limit), "rb", buffering=0, closefd=True) as handle:
        return read_at_most(handle, limit)


def read_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes (or fewer) of the regular file ``path``, for a signature check."""
    with open(open_untrusted(path), "rb", buffering=0, closefd=True) as handle:
        return read_at_most_prefix(handle, size)


def read_tail(path: Path, size: int) -> bytes:
    """The last ``size`` bytes (or fewer) of the regular file ``path``: a log's end, whatever
    its length (a run's log may be gigabytes; its last error line is in the tail)."""
    with open(open_untrusted(path), "rb", buffering=0, closefd=True) as handle:
        end = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, end - size))
        return read_at_most_prefix(handle, size)


def read_at_most_prefix(handle: Any, size: int) -> bytes:
    """Up to ``size`` bytes from the start of ``handle`` (short reads repeated)."""
    chunks, total = [], 0
    while total < size:
        chunk = handle.read(size - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def digest_file(path: Path, algorithm: str, limit: int) -> str:
    """Hex digest of the regular file ``path`` of at most ``limit`` bytes, read in chunks."""
    digest = hashlib.new(algorithm, usedforsecurity=algorithm != "md5")
    total = 0
    with open(open_untrusted(path, limit), "rb", buffering=0, closefd=True) as handle:
        while chunk := handle.read(1 << 20):
            total += len(chunk)
            if total > limit:
                raise BadInput(f"is over the {limit} bytes this reader accepts")
            digest.update(chunk)
    return digest.hexdigest()


def open_stream(path: Path, limit: int) -> Any:
    """A binary file object over the regular file ``path`` that refuses past ``limit`` bytes.

    For readers that stream (the CIFAR-10 archive): opened as :func:`open_untrusted`.
    """
    return _LimitedReader(open(open_untrusted(path, limit), "rb", closefd=True), limit)


class _LimitedReader(io.RawIOBase):
    """``read`` of at most ``limit`` bytes in all; one more is :class:`BadInput`."""

    def __init__(self, handle: Any, limit: int) -> None:
        self._handle = handle
        self._left = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        count: int = self._handle.readinto(view[: min(len(view), self._left + 1)])
        self._left -= count
        if self._left < 0:
            raise BadInput("grew past its cap while it was read")
        return count

    def close(self) -> None:
        self._handle.close()
        super().close()


def read_at_most(handle: Any, limit: int) -> bytes:
    """All of ``handle`` if it holds at most ``limit`` bytes, else :class:`BadInput`.

    Read in chunks: ``read(limit + 1)`` would allocate the whole limit up front,
    whatever the file holds (a 9-byte file read with a 256 MiB limit costs 256 MiB).
    """
    chunks, total = [], 0
    while total <= limit:
        chunk = handle.read(min(1 << 20, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    if total > limit:
        raise BadInput(f"is over the {limit} bytes this reader accepts")
    return b"".join(chunks)


def json_depth(text: str | bytes) -> int:
    """The deepest nesting of ``[`` and ``{`` outside strings, in one pass (no recursion)."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    return deepest


def _number(kind: type) -> Any:
    def parse(text: str) -> Any:
        if len(text) > NUMBER_CHARS_MAX:
            raise BadInput(f"holds a number of {len(text)} characters")
        return kind(text)

    return parse


def json_values(text: str | bytes) -> int:
    """An upper bound on the values ``json.loads`` makes of ``text``, from its bytes alone.

    Every value but the first follows a ``,`` or a ``:`` or opens a container, so
    one more than the count of ``,`` ``:`` ``[`` ``{`` bounds them (delimiters
    inside strings only make it an overcount). Four ``bytes.count`` calls: C speed.
    """
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return 1 + sum(data.count(delimiter) for delimiter in (b",", b":", b"[", b"{"))


def _check_json_shape(text: str | bytes, depth_max: int, values_max: int) -> None:
    """Values and nesting, on the bytes, before the parser makes an object."""
    values = json_values(text)
    if values > values_max:
        raise BadInput(f"holds up to {values} JSON values, over the {values_max} accepted")
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if data.count(b"[") + data.count(b"{") > depth_max and json_depth(data) > depth_max:
        raise BadInput(f"nests deeper than {depth_max} levels")


def loads_json(text: str | bytes, depth_max: int = JSON_DEPTH_MAX,
               values_max: int = JSON_VALUES_MAX) -> Any:
    """``json.loads`` with the values, nesting and number checks above; :class:`BadInput`."""
    if len(text) > 0:
        _check_json_shape(text, depth_max, values_max)
    try:
        return json.loads(text, parse_int=_number(int), parse_float=_number(float))
    except BadInput:
        raise
    except json.JSONDecodeError as exc:
        raise BadInput(f"is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise BadInput(f"is not valid JSON ({type(exc).__name__})") from None


class OverAllowance(BadInput):
    """This read would take a shared :class:`Allowance` past its total."""


class Allowance:
    """JSON values shared by several reads (a report of many files): each takes its share first.

    Why: every file under its own cap, a directory of a hundred of them is still a
    hundred times the memory. A reader given an allowance takes the bound of what
    the file can make (:func:`json_values`) before parsing it, and the read that
    would go past it is refused.
    """

    def __init__(self, values: int) -> None:
        self.total = values
        self.left = values

    def take(self, values: int) -> None:
        if values > self.left:
            raise OverAllowance(f"would bring what is read past {self.total} JSON values in all")
        self.left -= values


def read_json(path: Path, limit: int = RECORD_MAX_BYTES,
              allowance: Allowance | None = None) -> Any:
    """One JSON document from ``path``: :func:`read_capped`, then :func:`loads_json`."""
    data = read_capped(path, limit)
    if allowance is not None:
        allowance.take(json_values(data))
    return loads_json(data)


def read_json_lines(path: Path, limit: int = LOG_MAX_BYTES,
                    allowance: Allowance | None = None) -> list[Any]:
    """Every line of a JSON-lines file that parses; a torn or bad line is skipped.

    The file as a whole is capped; each line is checked as :func:`loads_json` does.
    """
    data = read_capped(path, limit)
    values = json_values(data) + data.count(b"\n")  # a line of "1" has no delimiter
    if values > JSON_VALUES_MAX:
        raise BadInput(f"holds up to {values} JSON values, over the {JSON_VALUES_MAX} accepted")
    if allowance is not None:
        allowance.take(values)
    found = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            found.append(loads_json(line))
        except BadInput:
            continue
    return found


def parse_number(text: str) -> float:
    """A finite decimal number of at most :data:`NUMBER_CHARS_MAX` characters, or BadInput."""
    if len(text) > NUMBER_CHARS_MAX:
        raise BadInput(f"holds a number of {len(text)} characters")
    try:
        value = float(text)
    except ValueError:
        raise BadInput(f"holds {clip(text, 30)!r} where a number belongs") from None
    if not math.isfinite(value):
        raise BadInput(f"holds {clip(text, 30)!r} where a finite number belongs")
    return value


def read_csv_table(path: Path, limit: int = CSV_MAX_BYTES, rows_max: int = CSV_ROWS_MAX,
                   columns_max: int = CSV_COLUMNS_MAX) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a UTF-8 CSV file, every count bounded before it is kept.

    Each row must have the header's width; a cell is at most :data:`CSV_CELL_MAX`
    characters (``csv``'s own field limit is 128 KiB); a row past ``rows_max`` or
    a header past ``columns_max`` is refused as it is read.
    """
    data = read_capped(path, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"is not UTF-8 text (byte {brief(exc.start)})") from None
    rows: list[list[str]] = []
    header: list[str] | None = None
    try:
        for number, row in enumerate(_csv_rows(text), start=1):
            if header is None:
                if not 0 < len(row) <= columns_max:
                    raise BadInput(f"has a header of {len(row)} columns, not 1 to {columns_max}")
                header = row
                continue
            if len(row) != len(header):
                raise BadInput(f"row {number} has {len(row)} cells for {len(header)} columns")
            if len(rows) >= rows_max:
                raise BadInput(f"holds more than {rows_max} rows")
            rows.append(row)
    except csv.Error as exc:
        raise BadInput(f"is not valid CSV ({clip(str(exc), 60)})") from None
    return header or [], rows


def _csv_rows(text: str) -> Iterator[list[str]]:
    """``csv.reader`` rows, each cell held to :data:`CSV_CELL_MAX` characters.

    ``csv``'s own field limit (128 KiB) is process-wide state, so it is left alone:
    a longer cell is refused here, as soon as its row is split.
    """
    for row in csv.reader(io.StringIO(text, newline="")):
        if any(len(cell) > CSV_CELL_MAX for cell in row):
            raise BadInput(f"holds a cell of more than {CSV_CELL_MAX} characters")
        yield row


@functools.cache
def _loaders() -> tuple[Any, Any]:
    """(the safe loader, the checked loader), made on first use.

    PyYAML is imported here, not with the module: the image build's VGG19 bake
    runs the downloader with the standard library only (``python -S``), and the
    downloader hashes through this module. libyaml's parser is used when PyYAML
    was built with it (the wheels are): linear, and about ten times faster than
    the pure-Python one.
    """
    import yaml

    safe: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class CheckedLoader(safe):
        """PyYAML's safe loader, with the composed node graph checked before construction."""

        def construct_document(self, node: yaml.Node) -> Any:
            _check_yaml_nodes(node)
            return super().construct_document(node)

    return safe, CheckedLoader


def _check_yaml_nodes(root: yaml.Node) -> None:
    """Count nodes as construction would visit them (an alias's target once per use)."""
    import yaml

    seen: dict[int, int] = {}  # node id -> nodes under it, aliases counted in full

    def size(node: yaml.Node, depth: int) -> int:
        if depth > YAML_DEPTH_MAX:
            raise BadInput(f"nests deeper than {YAML_DEPTH_MAX} levels")
        key = id(node)
        if key in seen:
            return seen[key]
        seen[key] = 1  # a node that holds itself (an anchor inside itself) counts once
        total = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                total += size(child, depth + 1)
        elif isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                total += size(key_node, depth + 1) + size(value_node, depth + 1)
        if total > YAML_NODES_MAX:
            raise BadInput(f"stands for more than {YAML_NODES_MAX} YAML nodes (aliases counted)")
        seen[key] = total
        return total

    size(root, 0)


def _flow_depth(text: str) -> int:
    """The deepest run of open ``[`` and ``{`` (quotes not parsed: only ever an overcount)."""
    depth = deepest = 0
    for char in text:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}" and depth:
            depth -= 1
    return deepest


def _check_yaml_events(text: str) -> None:
    """Depth and event count from the parser's event stream, before the composer runs.

    libyaml's parser (and PyYAML's) keeps its state on a heap stack, so this walk
    cannot overflow however deep the text nests; the composer recurses per level.
    """
    import yaml

    opens = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
    closes = (yaml.SequenceEndEvent, yaml.MappingEndEvent)
    depth = 0
    for events, event in enumerate(yaml.parse(text, Loader=_loaders()[0]), start=1):
        if events > YAML_EVENTS_MAX:
            raise BadInput(f"holds more than {YAML_EVENTS_MAX} YAML events")
        if isinstance(event, opens):
            depth += 1
            if depth > YAML_DEPTH_MAX:
                raise BadInput(f"nests deeper than {YAML_DEPTH_MAX} levels")
        elif isinstance(event, closes):
            depth -= 1


def loads_yaml(text: str, limit: int = SPEC_MAX_BYTES) -> Any:
    """``yaml.safe_load`` with size, nesting, aliases and node count bounded (see module).

    PyYAML is pure Python (about a megabyte a second), so the size cap is also
    the time bound: at most ``limit`` characters.
    """
    if len(text) > limit:
        raise BadInput(f"is {len(text)} characters, over the {limit} this reader accepts")
    if _flow_depth(text) > YAML_DEPTH_MAX:  # PyYAML's scanner is quadratic in it
        raise BadInput(f"nests deeper than {YAML_DEPTH_MAX} levels")
    import yaml

    try:
        _check_yaml_events(text)
        return yaml.load(text, Loader=_loaders()[1])  # a SafeLoader: constructs no objects
    except BadInput:
        raise
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(exc, "problem", None) or clip(str(exc), 60)
        raise BadInput(f"is not valid YAML{where} ({what})") from None
    except (RecursionError, ValueError, TypeError) as exc:
        raise BadInput(f"is not valid YAML ({type(exc).__name__}: {clip(str(exc), 40)})") from None


def open_image(path: Path, pixels_max: int = IMAGE_PIXELS_MAX,
               limit: int = IMAGE_MAX_BYTES) -> Any:
    """The image at ``path`` (:func:`read_capped`), opened by Pillow, no pixel decoded yet.

    Its header's width times height is checked against ``pixels_max`` here, so the
    caller's ``load``/``convert``/``thumbnail`` decodes at most that many pixels.
    """
    return image_from_bytes(read_capped(path, limit), pixels_max)


def image_from_bytes(raw: bytes, pixels_max: int = IMAGE_PIXELS_MAX) -> Any:
    """:func:`open_image` of bytes already read (capped); every refusal is :class:`BadInput`."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # checked below
            image = Image.open(io.BytesIO(raw))
    except Image.DecompressionBombError:
        raise BadInput(f"declares more than {pixels_max} pixels") from None
    except UnidentifiedImageError:
        raise BadInput("is not an image Pillow can read") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise BadInput(f"is a damaged image ({brief(str(exc), 60)})") from None
    width, height = image.size
    if width * height > pixels_max:
        image.close()
        raise BadInput(f"is {width}x{height} pixels, over the {pixels_max} this reader decodes")
    return image


def read_yaml(path: Path, limit: int = SPEC_MAX_BYTES) -> Any:
    """One YAML document from ``path`` (UTF-8): :func:`read_capped`, then :func:`loads_yaml`."""
    data = read_capped(path, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"is not UTF-8 text (byte {brief(exc.start)})") from None
    return loads_yaml(text, limit)
