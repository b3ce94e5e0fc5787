"""XID and SXid events in kernel-log lines, and what NVIDIA's catalogue says each one means.

The NVIDIA driver reports a GPU error to the kernel log as an XID, the NVSwitch driver an
NVSwitch error as an SXid. Their formats, as NVIDIA documents them and as real logs show:

* XID, "Runtime NVSwitch and GPU Errors" in the Fabric Manager User Guide:
  ``NVRM: Xid (PCI:<gpu_pci_bdf>): <Xid_Value>, <raw error information>``, e.g.
  ``NVRM: Xid (PCI:0000:34:00): 45, Ch 00000010``; the XID catalogue's own examples
  ``NVRM: Xid (PCI:0000:5a:00): 79, GPU has fallen off the bus.`` and the older driver's
  ``NVRM: Xid (0000:03:00): 14, Channel 00000001`` (no ``PCI:``); a real dmesg capture
  ``NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off
  the bus.``; and NVLink5 XIDs 144-150 with no comma after the code,
  ``Xid (PCI:0000:BB:DF): <Xid Number> <sub component> <fatal vs nonfatal> ...``.
* SXid, same guide: ``nvidia-nvswitchX: SXid (PCI:<switch_pci_bdf>): <SXid_Value>, <Fatal or
  Non-Fatal>, <Link No> <Error Description>``, e.g. ``nvidia-nvswitch3: SXid
  (PCI:0000:c1:00.0): 28006, Non-fatal, Link 46 MC TS crumbstore MCTO (First)``, followed by
  lines of raw data with the same SXid (``28006, Severity 0 Engine instance 46 ...``,
  ``28006, Data {0x00140004, ...}``): those continue the event and are not counted again.
* Each line as ``dmesg`` and ``journalctl -k -o short-monotonic`` print it starts with the
  kernel's timestamp, seconds since boot: ``[6781741.548779] NVRM: Xid ...``; syslog puts
  its own prefix first (``Dec  2 10:43:35 worker4 kernel: [240314.528856] NVRM: Xid
  (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error
  (DBE) has been detected on GPU in the framebuffer at physAddr ...``, NVIDIA/gpu-operator
  issue 1146). Real XID 149: ``NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1
  (0x000fe406 ...)`` (leptonai/gpud pull request 1174).

:func:`parse_line` is a parser of outside text (anything may be in a kernel log): it looks at
no more than :data:`MAX_LINE` characters of a line, uses patterns without nested repetition,
and returns None for anything that is not an event. The catalogue is ``xid.yaml``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

MAX_LINE = 4096  # longer lines are cut here: the event's fields come first
PASS, WARN, FAIL, INFO = "pass", "warn", "fail", "info"

_TIMESTAMP = re.compile(r"\[\s{0,12}(\d{1,12})\.(\d{1,9})\]")
# "Fatal" / "Non-fatal" as the guides write them, "Nonfatal" as GB200 logs do, in any case
_SEVERITY = r"fatal|non[- ]?fatal"
_BDF = r"(?P<bdf>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)"
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?" + _BDF + r"\): ?(?P<code>\d{1,6})\b,? ?(?P<text>.*)"
)
_SXID = re.compile(
    r"nvidia-nvswitch(?P<switch>\d{1,4}): SXid \((?:PCI:)?" + _BDF + r"\):"
    r" ?(?P<code>\d{1,6}), (?P<severity>" + _SEVERITY + r")\b,? ?(?P<text>.*)",
    re.IGNORECASE,
)
_XID154 = re.compile(r"to 0x[0-9A-Fa-f]{1,8} \((?P<action>[^()]{1,60})\)")
NVLINK5_CODES = range(144, 151)
# NVLink5 XIDs 144-150: "<unit> <Fatal|Nonfatal|Non-fatal> ..." right after the code.
# The driver may put "pid=..., name=...," before the message, as it does for other XIDs.
_NVLINK5_SEVERITY = re.compile(
    r"^(?:pid=[^,]{1,60}, name=[^,]{1,80}, )?[A-Za-z0-9_]{1,40} (?P<severity>" + _SEVERITY
    + r")\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Event:
    """One XID or SXid line: which device reported which code, when, and what it said."""

    kind: str  # "XID" or "SXid"
    code: int
    pci: str  # the bus address as the driver printed it, lower case
    text: str  # the rest of the line after the code (cut to 200 characters)
    timestamp_us: int | None  # kernel time since boot, None when the line has none
    fatal: bool | None = None  # SXid, NVLink5 XID (144-150): the driver's Fatal / Non-fatal
    switch: int | None = None  # SXid only: nvidia-nvswitchN


def timestamp_us(line: str) -> int | None:
    """The ``[seconds.fraction]`` kernel timestamp of a line, in microseconds.

    It opens a dmesg or ``journalctl -o short-monotonic`` line; a syslog file puts it after
    its own prefix (``Dec  2 10:43:35 worker4 kernel: [240314.528856] NVRM: ...``).
    """
    match = _TIMESTAMP.search(line[:120])
    if match is None:
        return None
    fraction = (match[2] + "000000")[:6]
    return int(match[1]) * 1_000_000 + int(fraction)


def parse_line(line: str) -> Event | None:
    """The XID or SXid event on this kernel-log line, or None."""
    line = line[:MAX_LINE]
    if "Xid" not in line:  # both "NVRM: Xid" and "SXid"
        return None
    xid = _XID.search(line)
    if xid is not None:
        text = xid["text"][:200].strip()
        code = int(xid["code"])
        severity = _NVLINK5_SEVERITY.match(text) if code in NVLINK5_CODES else None
        return Event(
            "XID",
            code,
            xid["bdf"].lower(),
            text,
            timestamp_us(line),
            # NVLink5's own Fatal / Nonfatal, so the two are counted (and judged) apart
            fatal=None if severity is None else severity["severity"].lower() == "fatal",
        )
    sxid = _SXID.search(line)
    if sxid is not None:
        return Event(
            "SXid",
            int(sxid["code"]),
            sxid["bdf"].lower(),
            sxid["text"][:200].strip(),
            timestamp_us(line),
            fatal=sxid["severity"].lower() == "fatal",
            switch=int(sxid["switch"]),
        )
    return None


def recovery_action(event: Event) -> str | None:
    """XID 154's recovery action (``Node Reboot Required`` ...) from its message."""
    match = _XID154.search(event.text)
    return match["action"].strip() if match else None


def nvlink5_severity(event: Event) -> str | None:
    """``fatal`` or ``non-fatal`` from an NVLink5 XID's message (144-150), or None."""
    if event.kind != "XID" or event.code not in NVLINK5_CODES or event.fatal is None:
        return None
    return "fatal" if event.fatal else "non-fatal"


# --- the catalogue -----------------------------------------------------------------------


@dataclass(frozen=True)
class Guidance:
    """What NVIDIA says to do, and how that is judged here."""

    verdict: str
    action: str  # the short word: reboot the node, reset the GPU ...
    nvidia: str  # NVIDIA's own text


@dataclass(frozen=True)
class Entry:
    """One row of NVIDIA's XID catalogue."""

    code: int
    mnemonic: str
    description: str
    immediate: str | None
    investigatory: str | None
    trigger: str | None


@dataclass(frozen=True)
class Catalogue:
    documents: dict[str, dict[str, str]]
    xids: dict[int, Entry]
    buckets: dict[str, Guidance]
    xid154: dict[str, Guidance]
    sxid_fatal: Guidance
    sxid_non_fatal: Guidance
    nvlink5: dict[str, Guidance] = field(default_factory=dict)  # "fatal" / "non-fatal"
    siblings: dict[int, tuple[int, str]] = field(default_factory=dict)  # code -> (sibling, why)
    applies: dict[int, dict[str, bool]] = field(default_factory=dict)  # code -> column -> YES

    def applies_to(self, code: int, gpu_name: str) -> tuple[str, bool] | None:
        """(column, YES?) of NVIDIA's "Applies to" columns for a GPU by its NVML name, or None."""
        column = architecture_column(gpu_name)
        row = self.applies.get(code)
        if column is None or row is None or column not in row:
            return None
        return column, row[column]

    def cite(self, key: str) -> str:
        doc = self.documents[key]
        return f"{doc['title']} ({doc['where']}, checked {doc['checked']})"

    def guidance(self, event: Event, others: frozenset[int] = frozenset()) -> Guidance:
        """NVIDIA's guidance for ``event``; ``others``: XID codes seen on the same device.

        XID 45 alone means "restart Fabric Manager", beside other XIDs it follows them
        (WORKFLOW_XID_45); XID 154 carries its recovery action in its message.
        """
        if event.kind == "SXid":
            return self.sxid_fatal if event.fatal else self.sxid_non_fatal
        entry = self.xids.get(event.code)
        if entry is None:
            return Guidance(
                WARN,
                "look the code up in NVIDIA's current XID catalogue",
                f"XID {event.code} is not in the catalogue transcribed here "
                f"({self.documents['xid-catalog']['date']})",
            )
        if entry.immediate is None:
            return self._no_bucket(event, entry, others)
        if entry.immediate == "WORKFLOW_NVLINK5_ERR":
            severity = nvlink5_severity(event)
            if severity in self.nvlink5:
                return self.nvlink5[severity]
        if entry.immediate == "XID_154":
            action = recovery_action(event)
            if action in self.xid154:
                return self.xid154[action]
            return Guidance(WARN, "read the XID 154 message", self.buckets["XID_154"].nvidia)
        if entry.immediate == "WORKFLOW_XID_45" and others - {45}:
            ignore = self.buckets["IGNORE"]
            return Guidance(INFO, "follow the other XIDs", ignore.nvidia)
        return self.buckets[entry.immediate]

    def _no_bucket(self, event: Event, entry: Entry, others: frozenset[int]) -> Guidance:
        """A code NVIDIA gives no bucket: its documented sibling's, or a warn that says so."""
        if entry.code in self.siblings:
            code, why = self.siblings[entry.code]
            sibling = self.guidance(Event("XID", code, event.pci, event.text, event.timestamp_us),
                                    others)
            return Guidance(sibling.verdict, f"{sibling.action} (as XID {code})",
                            f"no resolution bucket in the catalogue; sibling: {why}. "
                            f"{sibling.nvidia}")
        note = f" NVIDIA's note: {entry.trigger}" if entry.trigger else ""
        return Guidance(WARN, "NVIDIA gives no action for this XID; look at it",
                        f"no resolution bucket in the catalogue for XID {entry.code}.{note}")


# NVML's product name -> the catalogue's "Applies to" column: the column names one GPU of each
# architecture (A100: Ampere, H100: Hopper, B100: Blackwell, GB200: Grace Blackwell); ours.
_COLUMNS = (
    (re.compile(r"\bGB\d{3}"), "GB200"),
    (re.compile(r"\bB\d{3}\b"), "B100"),
    (re.compile(r"\b(H\d{3}|GH\d{3})\b"), "H100"),
    (re.compile(r"\bA\d{3}\b"), "A100"),
)


def architecture_column(gpu_name: str) -> str | None:
    """The catalogue column for ``NVIDIA H200`` (H100), ``NVIDIA GB200`` (GB200) ...; else None."""
    for pattern, column in _COLUMNS:
        if pattern.search(gpu_name):
            return column
    return None


def parse_catalogue(data: dict[str, Any]) -> Catalogue:
    """Build the :class:`Catalogue`, checking every bucket a row names has its guidance."""

    def guidance(raw: dict[str, Any]) -> Guidance:
        text = " ".join(str(raw.get("nvidia", "")).split())
        return Guidance(str(raw["verdict"]), str(raw["action"]), text)

    buckets = {str(k): guidance(v) for k, v in data["buckets"].items()}
    xids: dict[int, Entry] = {}
    for row in data["xids"]:
        entry = Entry(
            int(row["code"]),
            str(row["mnemonic"]),
            str(row["description"]),
            row.get("immediate"),
            row.get("investigatory"),
            row.get("trigger"),
        )
        if entry.code in xids:
            raise ValueError(f"XID {entry.code} appears twice in the catalogue")
        if entry.immediate is not None and entry.immediate not in buckets:
            raise ValueError(f"XID {entry.code}: no guidance for bucket {entry.immediate}")
        xids[entry.code] = entry
    for code, sibling in data.get("siblings", {}).items():
        target = xids.get(int(sibling["sibling"]))
        if int(code) not in xids or target is None or target.immediate is None:
            raise ValueError(f"XID {code}: sibling {sibling['sibling']} has no bucket to follow")
    columns = [str(c) for c in data.get("applies", {}).get("columns", [])]
    applies: dict[int, dict[str, bool]] = {}
    for code, flags in data.get("applies", {}).get("rows", {}).items():
        words = str(flags).split()
        if len(words) != len(columns) or set(words) - {"YES", "NO"}:
            raise ValueError(f"XID {code}: applies row {flags!r} is not {len(columns)} YES/NO")
        applies[int(code)] = {c: w == "YES" for c, w in zip(columns, words, strict=True)}
    return Catalogue(
        documents={
            str(k): {str(a): str(b) for a, b in v.items()} for k, v in data["documents"].items()
        },
        xids=xids,
        buckets=buckets,
        xid154={str(k): guidance(v) for k, v in data["xid154_actions"].items()},
        sxid_fatal=guidance(data["sxid"]["fatal"]),
        sxid_non_fatal=guidance(data["sxid"]["non-fatal"]),
        nvlink5={str(k): guidance(v) for k, v in data.get("nvlink5_decode", {}).items()},
        siblings={
            int(k): (int(v["sibling"]), str(v["why"])) for k, v in data.get("siblings", {}).items()
        },
        applies=applies,
    )


@cache
def load() -> Catalogue:
    """The packaged catalogue (``workloads/hardware/xid.yaml``)."""
    text = resources.files("workloads.hardware").joinpath("xid.yaml").read_text()
    return parse_catalogue(yaml.safe_load(text))
