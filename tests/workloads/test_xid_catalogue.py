"""Every code of NVIDIA's XID catalogue gets an action; NVLink5 XIDs by their message's severity.

The lines are the driver's format (``tests/workloads/kernel_log_fixture.py``), the text after
the code the catalogue's description or, for NVLink5 (144-150), the unit-severity-link shape of
real GB200 lines (``149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 ...)``, ``145, RLW_SRC_TRACK
Nonfatal XC1 i0 Link 12 (...)``, leptonai/gpud's parser tests). Every code in ``xid.yaml`` is
walked, not a sample.
"""

from __future__ import annotations

import pytest

from tests.workloads import kernel_log_fixture as klog
from workloads.hardware import xid

CATALOGUE = xid.load()
VERDICTS = {xid.FAIL, xid.WARN, xid.INFO}
UNITS = ("SAW_MVB", "RLW_REMAP", "RLW_SRC_TRACK", "TLW", "TREX", "NVLPW_CTRL", "NETIR", "MSE")


def guidance(code: int, text: str | None = None) -> xid.Guidance:
    event = xid.parse_line(klog.xid_line(1234.5, "0019:01:00", code, text))
    assert event is not None and event.code == code
    return CATALOGUE.guidance(event)


@pytest.mark.parametrize("code", sorted(CATALOGUE.xids))
def test_every_code_in_the_catalogue_has_a_verdict_and_an_action(code: int) -> None:
    entry = CATALOGUE.xids[code]
    found = guidance(code)
    assert found.verdict in VERDICTS and found.action and found.nvidia
    if entry.immediate is None and code in CATALOGUE.siblings:
        sibling, _ = CATALOGUE.siblings[code]
        assert found.action.endswith(f"(as XID {sibling})")
        assert found.verdict == CATALOGUE.buckets[CATALOGUE.xids[sibling].immediate or ""].verdict
    elif entry.immediate is None:
        assert found.verdict == xid.WARN and found.action.startswith("NVIDIA gives no action")
        assert f"no resolution bucket in the catalogue for XID {code}" in found.nvidia
    elif entry.immediate not in ("XID_154", "WORKFLOW_XID_45", "WORKFLOW_NVLINK5_ERR"):
        assert found == CATALOGUE.buckets[entry.immediate]


def test_the_catalogue_lists_every_code_to_its_last_once() -> None:
    assert sorted(CATALOGUE.xids) == list(range(1, max(CATALOGUE.xids) + 1))
    assert max(CATALOGUE.xids) >= 172


@pytest.mark.parametrize("code", list(xid.NVLINK5_CODES))
@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(
    ("severity", "verdict"),
    [("Fatal", xid.FAIL), ("Nonfatal", xid.WARN), ("Non-fatal", xid.WARN), ("", xid.WARN)],
)
def test_nvlink5_xids_are_judged_by_the_severity_their_message_states(
    code: int, unit: str, severity: str, verdict: str
) -> None:
    text = f"{unit} {severity} XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000)".replace(
        "  ", " ")
    found = guidance(code, text)
    assert found.verdict == verdict
    if severity == "Fatal":
        assert found.action.startswith("reset the GPU")
    elif severity:
        assert found.action.startswith("watch")
    else:  # no severity in the message: decode it by hand
        assert found == CATALOGUE.buckets["WORKFLOW_NVLINK5_ERR"]


@pytest.mark.parametrize(("code", "sibling"), [(167, 158), (169, 62), (171, 48), (172, 48)])
def test_codes_without_a_bucket_follow_their_documented_sibling(code: int, sibling: int) -> None:
    found, followed = guidance(code), guidance(sibling)
    assert found.verdict == followed.verdict == xid.FAIL
    assert found.action == f"{followed.action} (as XID {sibling})"


def test_a_sibling_without_a_bucket_is_refused() -> None:
    import copy
    from importlib import resources

    import yaml

    data = yaml.safe_load(resources.files("workloads.hardware").joinpath("xid.yaml").read_text())
    broken = copy.deepcopy(data)
    broken["siblings"][167] = {"sibling": 162, "why": "no bucket"}
    with pytest.raises(ValueError, match="XID 167: sibling 162 has no bucket"):
        xid.parse_catalogue(broken)


def test_every_code_has_its_four_applies_to_columns() -> None:
    assert set(CATALOGUE.applies) == set(CATALOGUE.xids)
    for code, row in CATALOGUE.applies.items():
        assert list(row) == ["A100", "H100", "B100", "GB200"], code
    # spot rows of the page: NVLink5 is Blackwell's, XID 74 (NVLink 1-4) is not; 121 is C2C
    assert CATALOGUE.applies[149] == {"A100": False, "H100": False, "B100": True, "GB200": True}
    assert CATALOGUE.applies[74] == {"A100": True, "H100": True, "B100": False, "GB200": False}
    assert CATALOGUE.applies[121] == {"A100": False, "H100": False, "B100": False, "GB200": True}


@pytest.mark.parametrize(
    ("name", "column"),
    [("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA A100 80GB PCIe", "A100"),
     ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H200", "H100"), ("NVIDIA H100 NVL", "H100"),
     ("NVIDIA GH200 480GB", "H100"), ("NVIDIA B200", "B100"), ("NVIDIA B300 SXM6 AC", "B100"),
     ("NVIDIA GB200", "GB200"), ("NVIDIA GB300", "GB200"), ("Tesla V100-SXM2-32GB", None),
     ("NVIDIA L40S", None), ("NVIDIA RTX A6000", None)],
)
def test_a_gpu_name_gives_its_catalogue_column(name: str, column: str | None) -> None:
    assert xid.architecture_column(name) == column
