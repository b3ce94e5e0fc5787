"""``workloads accept``'s verdict rules on recorded NVML readings and measurements.

The NVML readings go through the real reader (``workloads.hardware.nvml``) on the
replaying NVML stand-in (``tests/host/fake_nvml.py``, whose API is checked against
pynvml's), so the path from NVML's calls to a verdict is the production one.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.host import nvml_boards
from tests.host.fake_nvml import FakeNvml
from tests.workloads.conftest import REPO
from workloads.accept import checks, dcgm, links, verdicts
from workloads.accept.checks import Target
from workloads.accept.kernels import Device
from workloads.accept.verdicts import FAIL, INFO, PASS, SKIP, WARN, Finding
from workloads.hardware.nvml import GpuFacts, GpuWatch, Watcher
from workloads.hardware.reference import GpuModel, load

READINGS = nvml_boards.five_h100_one_fault_each()


def _model(device_id: int | None) -> GpuModel:
    model = load().model_for(device_id)
    assert model is not None
    return model


@pytest.fixture(scope="module")
def watched() -> list[GpuWatch]:
    """Five recorded H100s, read and sampled as the battery does (one idle, two loaded samples)."""
    watcher = Watcher(FakeNvml(READINGS))
    for _ in range(3):
        watcher.sample_once()
    return watcher.gpus


def test_the_reader_takes_every_fact_from_nvml(watched: list[GpuWatch]) -> None:
    facts = watched[0].facts
    assert facts.pci_device_id == 0x2330 and facts.name == "NVIDIA H100 80GB HBM3"
    assert (facts.pcie_max_generation, facts.pcie_max_width) == (5, 16)
    assert facts.max_sm_clock_mhz == 1980 and facts.power_limit_w == 700
    assert facts.nvlink_active == 18
    assert set(facts.nvlink_versions) == {pynvml.NVML_NVLINK_VERSION_4_0}
    assert facts.remapped_rows == (0, 0, False, False)
    assert [s.pcie_generation for s in watched[0].samples] == [1, 5, 5]
    assert _model(facts.pci_device_id).model == "H100 SXM5 80GB"


def test_a_healthy_gpu_passes_every_nvml_rule(watched: list[GpuWatch]) -> None:
    ref = load()
    gpu = watched[0]
    link = verdicts.pcie_link("GPU 0", gpu)
    assert link.verdict == PASS and link.reason == "Gen5 x16 (can train to Gen5 x16)"
    assert verdicts.clocks("GPU 0", gpu, ref.thresholds["clocks"]).verdict == PASS
    throttle = verdicts.throttle("GPU 0", gpu)
    assert throttle.verdict == PASS
    assert "software power cap (as designed under full load)" in throttle.reason
    assert verdicts.memory_errors("GPU 0", gpu).verdict == PASS
    link_row = links.from_watch("GPU 0", gpu, _model(gpu.facts.pci_device_id).nvlink, 5)
    assert link_row is not None and link_row.verdict == PASS


def test_a_link_at_x8_of_x16_fails_naming_the_width(watched: list[GpuWatch]) -> None:
    finding = verdicts.pcie_link("GPU 1", watched[1])
    assert finding.verdict == FAIL
    assert "x8 of x16" in finding.reason and "reseat" in finding.reason


def test_an_idle_link_at_gen1_is_not_a_finding_but_one_that_stays_there_is() -> None:
    """The generation counts at its best under load: every idle GPU drops to Gen1."""
    watcher = Watcher(FakeNvml(READINGS))
    watcher.sample_once()  # the idle reading only (what `--only nvml` sees)
    idle = verdicts.pcie_link("GPU 0", watcher.gpus[0])
    assert idle.verdict == PASS
    assert idle.reason == "x16 of x16; generation not judged (no sample under load)"
    watcher.sample_once()
    gpu = watcher.gpus[0]
    gpu.samples = [
        replace(s, pcie_generation=4) if s.utilization_percent else s for s in gpu.samples
    ]
    stuck = verdicts.pcie_link("GPU 0", gpu)
    assert stuck.verdict == FAIL and "Gen4 x16 (can train to Gen5 x16)" in stuck.reason
    assert "below Gen5 even under load" in stuck.reason


def test_a_throttled_clock_fails_and_names_the_reasons(watched: list[GpuWatch]) -> None:
    ref = load()
    clock = verdicts.clocks("GPU 2", watched[2], ref.thresholds["clocks"])
    assert clock.verdict == FAIL
    assert "median 700 MHz under load of 1,980 MHz maximum (35%)" in clock.reason
    throttle = verdicts.throttle("GPU 2", watched[2])
    assert throttle.verdict == FAIL
    assert "hardware slowdown, hardware thermal slowdown" in throttle.reason
    assert "max 91 °C" in throttle.reason and "check cooling" in throttle.reason


def test_a_pending_row_remap_fails_with_what_to_do(watched: list[GpuWatch]) -> None:
    finding = verdicts.memory_errors("GPU 3", watched[3])
    assert finding.verdict == FAIL
    assert "row remap is pending (2 rows remapped" in finding.reason
    assert "nvidia-smi -r" in finding.reason


def _facts(**changes: object) -> GpuFacts:
    base = GpuFacts(
        0,
        "X",
        None,
        0x2330,
        5,
        5,
        16,
        1980,
        2619,
        700.0,
        0,
        0,
        0,
        (0, 0, False, False),
        None,
        18,
        (4,) * 18,
    )
    return GpuFacts(**{**base.__dict__, **changes})


@pytest.mark.parametrize(
    ("changes", "verdict", "fragment"),
    [
        ({"remapped_rows": (0, 0, False, True)}, FAIL, "row remapping FAILED"),
        ({"remapped_rows": (0, 3, False, False)}, WARN, "3 rows remapped for uncorrectable"),
        ({"ecc_uncorrected_volatile": 2}, FAIL, "2 uncorrectable ECC errors since the driver"),
        ({"ecc_uncorrected_aggregate": 5}, WARN, "5 uncorrectable ECC errors over the GPU's life"),
        ({"remapped_rows": None, "retired_pages_pending": True}, FAIL, "page retirement"),
        ({"remapped_rows": None, "ecc_uncorrected_volatile": None}, SKIP, "no ECC"),
    ],
)
def test_memory_error_rules(changes: dict[str, object], verdict: str, fragment: str) -> None:
    finding = verdicts.memory_errors("GPU 0", GpuWatch(_facts(**changes)))
    assert finding.verdict == verdict and fragment in finding.reason


def test_missing_nvlinks_fail(watched: list[GpuWatch]) -> None:
    spec = _model(0x2330).nvlink
    finding = links.from_watch("GPU 4", watched[4], spec, 5)
    assert finding is not None and finding.verdict == FAIL
    assert "12 of 18 NVLinks active" in finding.reason
    down = links.from_watch(
        "GPU 0", GpuWatch(_facts(nvlink_active=0, nvlink_versions=())), spec, 8
    )
    assert down is not None and down.verdict == FAIL and "falls back to PCIe" in down.reason
    bridged = _model(0x2331).nvlink  # H100 PCIe: a bridge that may be absent
    assert links.from_watch("GPU 0", GpuWatch(_facts(nvlink_active=0)), bridged, 8) is None


def test_a_slot_that_limits_the_generation_warns() -> None:
    watcher = Watcher(FakeNvml(READINGS))
    watcher.sample_once()
    watcher.sample_once()
    gpu = watcher.gpus[0]
    gpu.facts = _facts(pcie_max_generation=4, pcie_gpu_max_generation=5)
    gpu.samples = [s.__class__(**{**s.__dict__, "pcie_generation": 4}) for s in gpu.samples]
    finding = verdicts.pcie_link("GPU 0", gpu)
    assert finding.verdict == WARN and "the slot limits this Gen5 GPU to Gen4" in finding.reason


# --- measured figures against limits -------------------------------------------------------


def test_bus_bandwidth_is_nccl_tests_definition() -> None:
    """nccl-tests doc/PERFORMANCE.md: all-reduce busbw = algbw × 2(n-1)/n, algbw = S/t."""
    assert verdicts.algorithm_bandwidth(1 << 30, 0.005) == pytest.approx(214.748, rel=1e-4)
    assert verdicts.bus_bandwidth(214.748, 8) == pytest.approx(214.748 * 1.75)
    assert verdicts.bus_bandwidth(100.0, 2) == 100.0  # two ranks: each sends half, twice
    assert verdicts.bus_bandwidth(100.0, 1) == 0.0  # one rank moves nothing
    with pytest.raises(ValueError):
        verdicts.bus_bandwidth(1.0, 0)


@given(st.integers(1, 1024), st.floats(1e-3, 1e4))
def test_bus_bandwidth_factor_for_every_rank_count(ranks: int, algbw: float) -> None:
    factor = verdicts.bus_bandwidth(algbw, ranks) / algbw
    assert factor == pytest.approx(2 * (ranks - 1) / ranks)
    assert 0 <= factor < 2


def _nvlink_targets() -> list[Target]:
    ref = load()
    watcher = Watcher(FakeNvml(READINGS))
    gpus = [watcher.gpus[0], watcher.gpus[0]]
    return [
        Target(Device("GPU", i, g.facts.name, None), g, ref.model_for(0x2330))
        for i, g in enumerate(gpus)
    ]


def test_an_allreduce_at_40_percent_of_its_fabric_fails() -> None:
    ref = load()
    targets = _nvlink_targets()
    limit, source, threshold = checks.interconnect_limit(targets, ref)
    assert limit == 450.0 and source.startswith("NVLink 4 × 18 links per GPU")
    finding = verdicts.against_limit(
        "allreduce",
        "GPUs ×8",
        "best busbw",
        0.40 * limit,
        "GB/s",
        limit,
        ref.thresholds[threshold],
        source,
    )
    assert finding.verdict == FAIL and finding.fraction == pytest.approx(0.40)
    assert finding.reason.startswith("40% of 450 GB/s (NVLink 4")
    assert "NVLink rows, Fabric Manager" in finding.reason
    healthy = verdicts.against_limit(
        "allreduce",
        "GPUs ×8",
        "best busbw",
        370.0,
        "GB/s",
        limit,
        ref.thresholds[threshold],
        source,
    )
    assert healthy.verdict == PASS  # nccl-tests #212: 370 GB/s on a healthy 8× H100


def test_gpus_without_nvlinks_are_held_to_their_pcie_links() -> None:
    ref = load()
    watch = GpuWatch(_facts(nvlink_active=None, nvlink_versions=()))
    targets = [Target(Device("GPU", i, "X", None), watch, ref.model_for(0x2331)) for i in range(4)]
    limit, source, threshold = checks.interconnect_limit(targets, ref)
    assert limit == pytest.approx(3.938 * 16) and source.startswith("PCIe")
    assert threshold == "allreduce_pcie"


@given(st.floats(0, 2), st.floats(1, 1e4))
def test_verdicts_follow_the_fraction(fraction: float, limit: float) -> None:
    threshold = load().thresholds["matmul"]
    finding = verdicts.against_limit(
        "matmul", "GPU 0", "bfloat16", fraction * limit, "TFLOP/s", limit, threshold, "datasheet"
    )
    expected = (
        FAIL
        if fraction < threshold.fail_below
        else WARN
        if fraction < threshold.warn_below
        else PASS
    )
    assert finding.verdict == expected
    unknown = verdicts.against_limit(
        "matmul", "GPU 0", "bfloat16", fraction * limit, "TFLOP/s", None, threshold, None
    )
    assert unknown.verdict == INFO and unknown.fraction is None


def test_a_gpu_slower_than_its_siblings_is_named() -> None:
    ref = load()
    rows = [
        verdicts.against_limit(
            "matmul",
            f"GPU {i}",
            "bfloat16",
            value,
            "TFLOP/s",
            989.5,
            ref.thresholds["matmul"],
            "datasheet",
        )
        for i, value in enumerate([720, 715, 722, 500, 718, 716, 721, 719])
    ]
    assert [r.verdict for r in rows] == [PASS] * 3 + [WARN] + [PASS] * 4  # 51 % of the sheet
    group = {f"GPU {i}": "H100 SXM5 80GB" for i in range(8)}
    judged = verdicts.compare_siblings(rows, ref.thresholds["siblings"], group)
    assert [r.verdict for r in judged] == [PASS] * 3 + [FAIL] + [PASS] * 4
    assert judged[3].reason.startswith("30% slower than its siblings (median 719 TFLOP/s)")
    assert "51% of 990 TFLOP/s (datasheet), below the 55% warn line" in judged[3].reason
    assert judged[3].details["siblings_share"] == pytest.approx(500 / 719)


def test_two_siblings_are_held_to_each_other_and_other_models_are_not_siblings() -> None:
    ref = load()
    rows = [
        Finding("membw", "GPU 0", "copy", INFO, "x", 3000.0, "GB/s"),
        Finding("membw", "GPU 1", "copy", INFO, "x", 2400.0, "GB/s"),
        Finding("membw", "GPU 2", "copy", INFO, "x", 800.0, "GB/s"),
    ]
    group = {"GPU 0": "H100", "GPU 1": "H100", "GPU 2": "L4"}
    judged = verdicts.compare_siblings(rows, ref.thresholds["siblings"], group)
    assert [r.verdict for r in judged] == [INFO, WARN, INFO]


def test_a_busy_host_warns() -> None:
    assert verdicts.busy_host(0.45, 0.10).verdict == WARN
    assert verdicts.busy_host(0.02, 0.10).verdict == PASS
    assert verdicts.busy_host(None, 0.10).verdict == SKIP


# --- DCGM ----------------------------------------------------------------------------------

DCGM3 = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {"name": "Denylist", "results": [{"status": "Pass"}]},
                    {"name": "NVML Library", "results": [{"status": "Pass"}]},
                    {
                        "name": "Environmental Variables",
                        "results": [
                            {
                                "status": "Warn",
                                "warnings": [{"warning": "CUDA_VISIBLE_DEVICES is set"}],
                            }
                        ],
                    },
                ],
            },
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "GPU Memory",
                        "results": [
                            {
                                "gpu_id": "3",
                                "status": "Fail",
                                "warnings": [{"warning": "Error using CUDA API cudaMalloc"}],
                            },
                            {"gpu_id": "0", "status": "Pass"},
                        ],
                    },
                ],
            },
        ]
    }
}
DCGM4 = {
    "DCGM Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {"name": "software", "results": [{"entity_id": 0, "status": "Pass"}]},
                ],
            }
        ]
    }
}


def test_dcgm_failures_are_named_per_gpu() -> None:
    findings = dcgm.judge(DCGM3, 1)
    assert [(f.device, f.verdict) for f in findings] == [("host", WARN), ("GPU 3", FAIL)]
    assert findings[1].reason == "GPU Memory: Fail (Error using CUDA API cudaMalloc)"
    assert dcgm.judge(DCGM4, 1) == [
        Finding("dcgm", "host", "diag level 1", PASS, "1 test results passed")
    ]
    assert dcgm.judge({}, 1)[0].verdict == WARN


def _fake_dcgmi(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "dcgmi"
    script.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_dcgmi_is_run_and_its_json_judged(tmp_path: Path) -> None:
    body = (
        f"assert sys.argv[1:] == ['diag', '-r', '2', '-j'], sys.argv\n"
        f"print({json.dumps(json.dumps(DCGM3))})"
    )
    findings = dcgm.run_diag(2, str(_fake_dcgmi(tmp_path, body)))
    assert [f.verdict for f in findings] == [WARN, FAIL]
    assert findings[0].item == "diag level 2"


def test_dcgmi_without_a_host_engine_warns_with_the_fix(tmp_path: Path) -> None:
    body = (
        "sys.stderr.write('Error: unable to establish a connection to the host engine\\n')\n"
        "sys.exit(255)"
    )
    [finding] = dcgm.run_diag(1, str(_fake_dcgmi(tmp_path, body)))
    assert finding.verdict == WARN
    assert "unable to establish a connection" in finding.reason
    assert "nvidia-dcgm" in finding.reason


def test_no_dcgm_is_a_skip_not_a_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # no dcgmi, in dcgm's own view only: a PATH set in os.environ would reach the children
    # that the suite's background jobs start meanwhile
    monkeypatch.setattr(dcgm, "shutil", SimpleNamespace(which=lambda *_a, **_k: None))
    [finding] = dcgm.run_diag(1)
    assert finding.verdict == SKIP and "DCGM not installed" in finding.reason


# --- bad input -------------------------------------------------------------------------------


def test_an_unknown_check_is_one_line_with_a_suggestion() -> None:
    env = {**os.environ, "WORKLOADS_RESULTS": "/nonexistent-never-written"}
    done = subprocess.run(
        [sys.executable, "-m", "workloads", "accept", "--only", "matmul", "matmull"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert line == (
        "workloads accept: error: unknown check 'matmull'; did you mean 'matmul'? "
        "choose from matmul, membw, transfer, allreduce, p2p, training, nvml, errors, dcgm, soak"
    )
    assert len(line) < 200


@given(st.text(min_size=1, max_size=300))
def test_every_unknown_check_name_gives_one_short_line(name: str) -> None:
    from workloads.accept.command import selected_checks
    from workloads.errors import WorkloadError

    try:
        chosen = selected_checks([name])
    except WorkloadError as exc:
        line = exc.one_line()
        assert "\n" not in line and len(line) < 200
    else:
        assert chosen  # only real names (or a comma list of them) get here
