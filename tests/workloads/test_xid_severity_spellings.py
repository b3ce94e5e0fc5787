"""Every spelling of "Fatal" / "Non-fatal" the drivers print is read, for SXids and NVLink5 XIDs.

The Fabric Manager User Guide writes ``<Fatal or Non-Fatal>``, its examples ``Non-fatal``; the
NVLink5 decode table's Severity column ``Fatal`` / ``Non-fatal`` and real GB200 logs
``Nonfatal``. A spelling the parser does not know must not drop the line (an SXid line was
dropped whole, so a fatal NVSwitch error never drained) nor leave an NVLink5 XID undecoded. The
family: each severity word in every case and joiner ("-", "", " "), with and without the
``pid='<unknown>', name=<unknown>,`` the driver puts before many XID messages.
"""

from __future__ import annotations

import itertools

import pytest

from workloads.hardware import xid

CASES = (str.lower, str.upper, str.title, lambda s: s[0].upper() + s[1:].lower())
FATAL = sorted({case("fatal") for case in CASES})
JOINERS = ("-", "", " ")
NON_FATAL = sorted({f"{case('non')}{joiner}{case2('fatal')}"
                    for case, case2 in itertools.product(CASES, CASES) for joiner in JOINERS})
SPELLINGS = [(word, True) for word in FATAL] + [(word, False) for word in NON_FATAL]
PID = ("", "pid='<unknown>', name=<unknown>, ", "pid=4242, name=python3, ")


@pytest.mark.parametrize(("word", "fatal"), SPELLINGS)
def test_an_sxid_is_read_whatever_its_severity_spelling(word: str, fatal: bool) -> None:
    line = (f"[ 812.250001] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, {word}, Link 46 "
            "MC TS crumbstore MCTO (First)")
    event = xid.parse_line(line)
    assert event is not None and event.kind == "SXid" and event.fatal is fatal, (line, event)
    verdict = xid.load().guidance(event).verdict
    assert verdict == (xid.load().sxid_fatal if fatal else xid.load().sxid_non_fatal).verdict


@pytest.mark.parametrize(("word", "fatal"), SPELLINGS)
@pytest.mark.parametrize("pid", PID)
@pytest.mark.parametrize("code", list(xid.NVLINK5_CODES))
def test_an_nvlink5_xid_is_decoded_whatever_its_severity_spelling(
    word: str, fatal: bool, pid: str, code: int,
) -> None:
    for link in ("-1", "03", "17"):
        line = (f"[6781741.548779] NVRM: Xid (PCI:0019:01:00): {code}, {pid}NETIR {word} XC0 i0 "
                f"Link {link} (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000)")
        event = xid.parse_line(line)
        assert event is not None and event.fatal is fatal, (line, event)
        guidance = xid.load().guidance(event)
        assert guidance == xid.load().nvlink5["fatal" if fatal else "non-fatal"], line


def test_raw_data_lines_after_an_sxid_still_are_not_events() -> None:
    for rest in ("Severity 0 Engine instance 46 Sub-engine instance 00",
                 "Data {0x00140004, 0x00140004, 0x00000000}"):
        assert xid.parse_line(f"nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): 28006, {rest}") is None
