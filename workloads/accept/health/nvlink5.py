"""NVLink5 (Blackwell) error counters, through the NVML fields NVIDIA documents for them.

On Blackwell, ``nvmlDeviceGetNvLinkErrorCounter``'s DL replay/recovery/CRC counters are not
where link errors are counted: NVML's "Field Value Enums" list per-link counters read with
``nvmlDeviceGetFieldValues`` and the link as the field's scope id
(``NVML_FI_DEV_NVLINK_COUNT_*``, what ``nvidia-smi nvlink -e`` prints on a GB200). Read here,
each as pynvml names it, and judged as what was added since the last run (the state keeps them):

* ``LINK_RECOVERY_FAILED_EVENTS``: a link that could not recover went down -- fail;
* ``EFFECTIVE_ERRORS`` (errors left after forward error correction), ``MALFORMED_PACKET_ERRORS``,
  ``BUFFER_OVERRUN_ERRORS``, ``RCV_ERRORS``, ``LOCAL_LINK_INTEGRITY_ERRORS``: warn;
* ``SYMBOL_ERRORS`` (before correction; a healthy link has some): kept, not judged.

A field the GPU or driver does not have comes back with its own ``nvmlReturn`` not
``NVML_SUCCESS`` and is left out: an H100 answers none of them, and gets no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from workloads.accept.verdicts import FAIL, PASS, WARN, Finding

CHECK = "health"
FAILING = ("LINK_RECOVERY_FAILED_EVENTS",)
WARNING = ("EFFECTIVE_ERRORS", "MALFORMED_PACKET_ERRORS", "BUFFER_OVERRUN_ERRORS",
           "RCV_ERRORS", "LOCAL_LINK_INTEGRITY_ERRORS")
KEPT = ("SYMBOL_ERRORS",)
COUNTERS = tuple(
    name for name in (*FAILING, *WARNING, *KEPT)
    if hasattr(pynvml, f"NVML_FI_DEV_NVLINK_COUNT_{name}")
)


def field_id(name: str) -> int:
    return int(getattr(pynvml, f"NVML_FI_DEV_NVLINK_COUNT_{name}"))


@dataclass(frozen=True)
class Counts:
    """One GPU's NVLink5 counters: link -> counter name -> count (only what NVML answered)."""

    index: int
    links: dict[int, dict[str, int]]


def read(nvml: Any, handle: Any, index: int, links: list[int]) -> Counts:
    """The counters of ``links`` (the GPU's active ones), one nvmlDeviceGetFieldValues call."""
    wanted = [(field_id(name), link) for link in links for name in COUNTERS]
    if not wanted or not hasattr(nvml, "nvmlDeviceGetFieldValues"):
        return Counts(index, {})
    try:
        values = nvml.nvmlDeviceGetFieldValues(handle, wanted)
    except Exception:  # the whole call refused (older driver): no counters
        return Counts(index, {})
    names = {field_id(name): name for name in COUNTERS}
    found: dict[int, dict[str, int]] = {}
    for value in values:
        if int(value.nvmlReturn) != pynvml.NVML_SUCCESS or int(value.fieldId) not in names:
            continue
        found.setdefault(int(value.scopeId), {})[names[int(value.fieldId)]] = int(
            value.value.ullVal)
    return Counts(index, found)


def added(now: Counts, before: dict[str, dict[str, int]] | None) -> dict[int, dict[str, int]]:
    """What each counter added since ``before``; all of it after a reset or on a first run."""
    out = {}
    for link, counts in now.links.items():
        last = (before or {}).get(str(link), {})
        out[link] = {
            key: value - last[key] if key in last and value >= last[key] else value
            for key, value in counts.items()
        }
    return out


def judge(label: str, now: Counts, before: dict[str, dict[str, int]] | None) -> Finding | None:
    """One row for the GPU's NVLink5 counters, or None when NVML has none of them."""
    if not now.links:
        return None
    span = "since the last run" if before is not None else "since the driver loaded"
    delta = added(now, before)

    def named(keys: tuple[str, ...]) -> list[str]:
        return [f"link {link}: {counts[k]} {k.lower().replace('_', ' ')}"
                for link, counts in sorted(delta.items()) for k in keys if counts.get(k)]

    details = {"added": {str(k): v for k, v in delta.items()}, "since": span}
    failing, warning = named(FAILING), named(WARNING)
    if failing:
        return Finding(CHECK, label, "NVLink5 errors", FAIL, f"{'; '.join(failing)} ({span}): a "
                       "link failed to recover; reset the GPU, then check the link's cabling or "
                       "tray", details={**details, "meaning": "NVLink recovery failed",
                                        "action": "reset the GPU, then check the link"})
    if warning:
        return Finding(CHECK, label, "NVLink5 errors", WARN, f"{'; '.join(warning)} ({span}): "
                       "watch the all-reduce rows; reset the GPU if they keep rising",
                       details=details)
    return Finding(CHECK, label, "NVLink5 errors", PASS, f"no NVLink5 errors on "
                   f"{len(delta)} links ({span})", details=details)


def as_state(now: Counts) -> dict[str, dict[str, int]]:
    return {str(link): dict(counts) for link, counts in now.links.items()}
