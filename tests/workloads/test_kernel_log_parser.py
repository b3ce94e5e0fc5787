"""The kernel-log parser is a parser of outside text: families of lines, not samples.

Any line (Hypothesis text, adversarial repetitions of the patterns' own pieces, a
megabyte without a newline) never raises and yields None or a well-formed event; every
line built in the driver's documented formats, with a syslog prefix or without, parses
back to what was written; and the reader stays within its bounds on a log too big, a
command that never ends, and a command that prints forever.
"""

from __future__ import annotations

import tracemalloc
from datetime import timedelta
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.workloads import kernel_log_fixture as klog
from workloads.hardware import kernel_log, xid

hexdigit = st.sampled_from("0123456789abcdef")
bdfs = st.builds(
    lambda d, b, s: f"{d}:{b}:{s}",
    st.text(hexdigit, min_size=4, max_size=4),
    st.text(hexdigit, min_size=2, max_size=2),
    st.text(hexdigit, min_size=2, max_size=2),
)
seconds = st.integers(min_value=0, max_value=10**9).map(lambda us: us / 1e6)
codes = st.integers(min_value=1, max_value=999)
texts = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=300)
pieces = st.sampled_from(
    ["NVRM: Xid (", "PCI:", "0000:3b:00", "): ", "79", ", ", "SXid (", "nvidia-nvswitch0: ",
     "Fatal", "Non-fatal", "[", "]", " 12.5", "\n", "\x00", "Xid"]
)


@settings(max_examples=150, deadline=timedelta(milliseconds=500))
@given(st.text(max_size=600))
def test_arbitrary_text_never_raises(line: str) -> None:
    event = xid.parse_line(line)
    assert event is None or (event.code >= 0 and len(event.text) <= 200)
    xid.timestamp_us(line)


@settings(max_examples=200, deadline=timedelta(milliseconds=500))
@given(st.lists(pieces, max_size=800))
def test_the_patterns_own_pieces_in_any_order_never_raise(parts: list[str]) -> None:
    event = xid.parse_line("".join(parts))
    assert event is None or event.kind in ("XID", "SXid")


@settings(max_examples=150)
@given(seconds, bdfs, codes, texts, st.booleans())
def test_documented_xid_lines_parse_back(
    at: float, bdf: str, code: int, text: str, syslog: bool
) -> None:
    line = klog.xid_line(at, bdf, code, text)
    if syslog:  # /var/log/syslog puts its own prefix before the kernel's timestamp
        line = f"Dec  2 10:43:35 worker4 kernel: {line}"
    event = xid.parse_line(line)
    assert event is not None and event.kind == "XID"
    assert (event.code, event.pci) == (code, bdf)
    assert event.timestamp_us == round(at * 1e6)
    assert event.text == text[:200].strip()


@settings(max_examples=200)
@given(seconds, st.integers(0, 63), bdfs, codes, st.booleans(), st.integers(0, 63), texts)
def test_documented_sxid_lines_parse_back_and_raw_data_lines_are_not_events(
    at: float, switch: int, bdf: str, code: int, fatal: bool, link: int, text: str
) -> None:
    head, *raw = klog.sxid_lines(at, switch, bdf + ".0", code, fatal, link, text)
    event = xid.parse_line(head)
    assert event is not None and event.kind == "SXid"
    assert (event.code, event.pci, event.fatal, event.switch) == (code, bdf + ".0", fatal, switch)
    assert [xid.parse_line(line) for line in raw] == [None, None]


def test_the_drivers_older_and_nvlink5_formats() -> None:
    old = xid.parse_line("[  966.503025] NVRM: Xid (0000:01:00): 31, Ch 0000000b, engmask 00000120")
    assert old is not None and (old.code, old.pci) == (31, "0000:01:00")
    nvl5 = xid.parse_line(
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x8)"
    )
    assert nvl5 is not None and nvl5.code == 145 and nvl5.timestamp_us is None
    assert xid.parse_line("NVRM: GPU at PCI:0000:34:00: GPU-c43f0536-e751-7211") is None


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.tuples(bdfs, codes), min_size=1, max_size=40))
def test_a_scan_counts_every_event_once(tmp_path: Path, events: list[tuple[str, int]]) -> None:
    lines = []
    for i, (bdf, code) in enumerate(events):
        lines += klog.noise(i, 3)
        lines.append(klog.xid_line(i + 0.5, bdf, code, "x"))
    scan = kernel_log.scan(klog.write(tmp_path / "kern.log", lines))
    assert sum(g.count for g in scan.groups) == len(events)
    assert scan.lines == len(lines) and scan.complete
    assert scan.last_us == round((len(events) - 1 + 0.5) * 1e6)
    later = kernel_log.scan(tmp_path / "kern.log", after_us=scan.last_us)
    assert later.groups == []


def test_memory_stays_bounded_on_a_log_of_many_devices_and_huge_lines(tmp_path: Path) -> None:
    """5,000 distinct devices and a 1 MiB line: the groups stop at MAX_GROUPS, nothing grows."""
    path = tmp_path / "kern.log"
    devices = 5_000
    with path.open("w") as out:
        for i in range(devices):
            out.write(klog.xid_line(i, f"0000:{i // 256 % 256:02x}:{i % 256:02x}", 79) + "\n")
        out.write("NVRM: Xid (" * ((1 << 20) // 11) + "\n")
    tracemalloc.start()
    scan = kernel_log.scan(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(scan.groups) == kernel_log.MAX_GROUPS
    assert scan.overflow == devices - kernel_log.MAX_GROUPS
    assert peak < 4 << 20, f"{peak / 2**20:.1f} MiB"


def test_the_size_bound_stops_a_command_that_prints_forever() -> None:
    scan = kernel_log.scan(
        commands=(("yes", "[ 1.000000] NVRM: Xid (PCI:0000:3b:00): 79, x"),), max_bytes=1 << 20
    )
    assert scan.readable and not scan.complete
    assert scan.groups[0].count == scan.lines - 1 or scan.groups[0].count == scan.lines


def test_the_deadline_stops_a_command_that_never_ends() -> None:
    scan = kernel_log.scan(commands=(("sleep", "600"),), deadline_s=0.3)
    assert not scan.readable and "within the time allowed" in (scan.error or "")


def test_a_file_cut_by_the_size_bound_says_so(tmp_path: Path) -> None:
    path = klog.write(tmp_path / "kern.log", klog.noise(0, 10_000))
    scan = kernel_log.scan(path, max_bytes=4096)
    assert not scan.complete and 0 < scan.lines < 10_000
