"""The ``errors`` check: planted XIDs get NVIDIA's action, counters get their published limits.

The kernel log is a file of lines in the driver's real formats (``kernel_log_fixture``), read
through the same streaming reader production uses (a command printing it); NVML is the
recorded-readings stand-in with the link error counters, its counter constants pynvml's own;
the AER counters are files in a sysfs tree the test builds in the kernel's layout. Only what
needs a GPU or a faulty machine is stood in for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.host.fake_nvml import ERRORS_API, NVLINK_COUNTERS, FakeNvmlErrors
from tests.workloads import kernel_log_fixture as klog
from tests.workloads.sysfs_fixture import pci_tree
from workloads.accept import battery, errors
from workloads.accept.verdicts import FAIL, INFO, PASS, SKIP, WARN, Finding
from workloads.hardware import aer, kernel_log, nvml_errors, xid
from workloads.hardware.reference import load

H100 = "0x2330"
GPU0, GPU1 = "0000:3b:00.0", "0000:86:00.0"


def readings_file(tmp: Path, gpus: list[dict[str, Any]]) -> Path:
    """Recorded NVML readings of H100 SXM GPUs at ``GPU0``/``GPU1``'s bus addresses."""
    data = []
    for gpu in gpus:
        data.append(
            {
                "name": "NVIDIA H100 80GB HBM3",
                "pci_device_id": H100,
                "memory_total": 85899345920,
                "nvlink": [4] * 18,
                "readings": [{"sm": 0, "mem": 0}],
                **gpu,
            }
        )
    path = tmp / "nvml.json"
    path.write_text(json.dumps({"gpus": data}))
    return path


class AtBus(FakeNvmlErrors):
    """The stand-in, with each GPU at the bus address its readings name."""

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        info = super().nvmlDeviceGetPciInfo(handle)
        info.busId = self.gpus[handle]["bus_id"]
        return info


def counters(**per_link: dict[str, int]) -> dict[str, dict[str, int]]:
    return {link.removeprefix("link"): counts for link, counts in per_link.items()}


def zero_links() -> dict[str, dict[str, int]]:
    return {str(link): dict.fromkeys(NVLINK_COUNTERS.values(), 0) for link in range(18)}


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernel log with an XID 79 on GPU 0 and an XID 48 on GPU 1 amid ordinary lines."""
    lines = klog.noise(1.0, 40)
    lines.append(klog.xid_line(6781741.548779, GPU0[:-2], 79))
    lines += klog.noise(6781741.6, 5)
    lines.append(klog.xid_line(240314.528856, GPU1[:-2], 48))
    lines.append(klog.xid_line(240314.60, GPU1[:-2], 63, "Row Remapper: New row marked for "
                               "remapping, reset gpu to activate."))
    path = klog.write(tmp_path / "kern.log", lines)
    # The production reader, reading the file through a command as it reads dmesg.
    monkeypatch.setattr(kernel_log, "JOURNAL", ("false",))
    monkeypatch.setattr(kernel_log, "DMESG", ("cat", str(path)))
    return path


def _rows(findings: list[Finding], item: str | None = None) -> list[Finding]:
    return [f for f in findings if f.check == "errors" and (item is None or f.item == item)]


def test_the_stand_in_has_pynvml_names_and_counters() -> None:
    assert [n for n in ERRORS_API if not hasattr(pynvml, n)] == []
    assert set(NVLINK_COUNTERS) == {
        pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
        pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
        pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
        pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    }
    assert {name for _, name in nvml_errors.COUNTERS} <= set(dir(pynvml))


def test_planted_xid_79_and_48_fail_with_nvidias_action(
    planted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The battery's default check list runs ``errors``; each planted XID fails on its GPU."""
    assert "errors" in battery.CHECKS
    sysfs = pci_tree(tmp_path / "sys", {GPU0: {}, GPU1: {}})
    monkeypatch.setattr(aer, "SYSFS_PCI", sysfs)
    nvml = AtBus(readings_file(tmp_path, [
        {"bus_id": "00000000:3B:00.0", "nvlink_errors": zero_links(), "pcie_replays": 0},
        {"bus_id": "00000000:86:00.0", "nvlink_errors": zero_links(), "pcie_replays": 0},
    ]))
    progress = battery.Progress(False)
    outcome = battery.run(["errors"], True, 1, "recorded", load(), progress, nvml=nvml)
    rows = {(f.device, f.item): f for f in _rows(outcome.findings)}
    assert ("GPU 0", "XID 79") in rows, (list(rows), [f.reason for f in outcome.findings])

    fallen = rows[("GPU 0", "XID 79")]
    assert fallen.verdict == FAIL
    assert fallen.details["nvidia_immediate"] == "RESTART_BM"
    assert fallen.details["action"] == "reboot the node"
    assert "GPU has fallen off the bus (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS)" in fallen.reason
    assert "Restart bare metal" in fallen.reason and "6,781,741.5 s after boot" in fallen.reason

    dbe = rows[("GPU 1", "XID 48")]
    assert dbe.verdict == FAIL
    assert dbe.details["nvidia_immediate"] == "WORKFLOW_XID_48"
    assert dbe.details["action"].startswith("drain and reset the GPU")
    assert "Double Bit ECC Error (ROBUST_CHANNEL_GPU_ECC_DBE)" in dbe.reason
    assert "w/ 63 or 64: DRAIN_AND_RESET" in dbe.details["nvidia_guidance"]
    assert "physAddr 0x7fdd60000" in dbe.details["message"]
    assert "Analyzing Xid Errors with the Xid Catalog" in (dbe.limit_source or "")

    remap = rows[("GPU 1", "XID 63")]
    assert remap.verdict == INFO and remap.details["nvidia_immediate"] == "IGNORE"
    log = rows[("host", "kernel log")]
    assert log.verdict == INFO and log.details["source"] == "cat " + str(planted)
    assert log.details["events"] == 3 and log.details["lines"] == 48
    # The XIDs come first, worst first; the counters of both GPUs are clean.
    assert [f.item for f in _rows(outcome.findings)][:3] == ["kernel log", "XID 79", "XID 48"]
    assert rows[("GPU 0", "NVLink errors")].verdict == PASS
    assert rows[("GPU 1", "PCIe AER")].verdict == PASS


def test_nvlink_counters_at_imbues_line_warn(tmp_path: Path) -> None:
    links = zero_links()
    links["3"] = {"replay": 3, "recovery": 1, "crc_flit": 1, "crc_data": 0}
    quiet = zero_links()
    quiet["7"] = {"replay": 2, "recovery": 0, "crc_flit": 0, "crc_data": 0}
    nvml = AtBus(readings_file(tmp_path, [
        {"bus_id": "00000000:3B:00.0", "nvlink_errors": links},
        {"bus_id": "00000000:86:00.0", "nvlink_errors": quiet},
    ]))
    gpus = nvml_errors.read_all(nvml)
    assert gpus[0].pci == GPU0 and len(gpus[0].nvlinks) == 18
    assert gpus[0].nvlinks[3].counts == {"replay": 3, "recovery": 1, "crc_flit": 1, "crc_data": 0}
    loud = errors.nvlink_finding("GPU 0", gpus[0])
    assert loud is not None and loud.verdict == WARN and loud.value == 5 and loud.limit == 5
    assert "link 3: 3 replay, 1 recovery, 1 crc flit" in loud.reason
    assert "Imbue" in (loud.limit_source or "") and "GCM" in (loud.limit_source or "")
    calm = errors.nvlink_finding("GPU 1", gpus[1])
    assert calm is not None and calm.verdict == PASS and "below the warn line of 5" in calm.reason


def test_nvlink_rows_need_links_and_counters(tmp_path: Path) -> None:
    nvml = AtBus(readings_file(tmp_path, [
        {"bus_id": "00000000:3B:00.0", "nvlink": [0] * 18},  # a PCIe card: no link up
        {"bus_id": "00000000:86:00.0"},  # links up, counters not supported
    ]))
    gpus = nvml_errors.read_all(nvml)
    assert errors.nvlink_finding("GPU 0", gpus[0]) is None
    unsupported = errors.nvlink_finding("GPU 1", gpus[1])
    assert unsupported is not None and unsupported.verdict == SKIP
    assert gpus[1].pcie_replays is None
    assert errors.pcie_replay_finding("GPU 1", None, 60.0).verdict == SKIP


@pytest.mark.parametrize(
    ("replays", "minutes", "verdict"),
    [(0, 60.0, PASS), (480, 60.0, PASS), (481, 60.0, WARN), (50, None, INFO)],
)
def test_pcie_replays_are_a_rate_against_dcgms_eight_per_minute(
    replays: int, minutes: float | None, verdict: str
) -> None:
    row = errors.pcie_replay_finding("GPU 0", replays, minutes)
    assert row.verdict == verdict
    if minutes:
        assert row.value == pytest.approx(replays / minutes) and row.limit == 8
        assert "DCGM_LIMIT_MAX_PCIREPLAY_RATE" in (row.limit_source or "")


def test_aer_counters_from_sysfs_judged_by_the_kernels_classes(tmp_path: Path) -> None:
    sysfs = pci_tree(
        tmp_path / "sys",
        {
            "0000:18:00.0": {"correctable": {"Receiver Error": 2, "Bad TLP": 1}},
            "0000:3b:00.0": {"nonfatal": {"Completion Timeout": 1}},
            "0000:86:00.0": {},
            "0000:af:00.0": None,  # no AER on this slot
        },
        ports={"0000:86:00.0": {"fatal": {"Surprise Down Error": 1}}},
    )
    gpus = ["0000:18:00.0", "0000:3b:00.0", "0000:86:00.0", "0000:af:00.0"]
    assert aer.nvidia_gpus(sysfs) == gpus  # the NIC beside them is no GPU
    read = {bdf: aer.read_gpu(bdf, sysfs) for bdf in aer.nvidia_gpus(sysfs)}
    assert read["0000:18:00.0"].gpu.totals == {"correctable": 3, "nonfatal": 0, "fatal": 0}
    assert read["0000:18:00.0"].gpu.errors == {"correctable": {"Receiver Error": 2, "Bad TLP": 1}}
    assert read["0000:86:00.0"].upstream is not None
    assert read["0000:86:00.0"].upstream.bdf == "0000:00:03.0"

    rows = {bdf: errors.aer_finding(bdf, counters) for bdf, counters in read.items()}
    assert rows["0000:18:00.0"].verdict == PASS and rows["0000:18:00.0"].value == 3
    assert "Receiver Error 2" in rows["0000:18:00.0"].reason
    assert rows["0000:3b:00.0"].verdict == WARN
    assert "Completion Timeout 1" in rows["0000:3b:00.0"].reason
    # The GPU counted nothing; its link partner saw the surprise down, and that is the GPU's.
    assert rows["0000:86:00.0"].verdict == FAIL
    assert "port above 0000:00:03.0: 1 fatal (Surprise Down Error 1)" in rows["0000:86:00.0"].reason
    assert rows["0000:af:00.0"].verdict == PASS  # its port has AER (all zero)


def test_an_unreadable_log_fails_a_gpu_host_and_skips_a_cpu_host(tmp_path: Path) -> None:
    unreadable = kernel_log.scan(commands=(("false",), (str(tmp_path / "no-dmesg"),)))
    assert not unreadable.readable and "`false` failed: exit 1" in (unreadable.error or "")
    assert "cannot run" in (unreadable.error or "")
    gpu = errors.kernel_log_finding(unreadable, gpus_present=True)
    assert gpu.verdict == FAIL and "pass --kernel-log FILE" in gpu.reason
    assert errors.kernel_log_finding(unreadable, gpus_present=False).verdict == SKIP


def test_the_catalogue_maps_every_case_nvidia_names(tmp_path: Path) -> None:
    catalogue = xid.load()
    assert len(catalogue.xids) == 172 and catalogue.xids[79].immediate == "RESTART_BM"
    assert catalogue.documents["xid-catalog"]["where"].startswith("https://docs.nvidia.com/deploy/")
    lines = [
        klog.xid_line(10.0, "0000:3b:00", 45),  # XID 45 alone: restart Fabric Manager
        klog.xid_line(11.0, "0000:86:00", 45),  # beside XID 94: follow that one
        klog.xid_line(11.1, "0000:86:00", 94),
        klog.xid_line(12.0, "0000:af:00", 154, "GPU recovery action changed from 0x0 (None) to "
                      "0x2 (Node Reboot Required)"),
        klog.xid_line(13.0, "0000:af:00", 173, "a code newer than the catalogue"),
        klog.xid_line(14.0, "0000:18:00", 13, "Graphics SM Warp Exception on (GPC 7, TPC 1)"),
        *klog.sxid_lines(15.0, 0, "0000:05:00.0", 20034, True, 63, "LTSSM Fault Up"),
        *klog.sxid_lines(16.0, 3, "0000:c1:00.0", 28006, False, 46, "MC TS crumbstore MCTO"),
    ]
    scan = kernel_log.scan(klog.write(tmp_path / "kern.log", lines))
    rows = {(f.device, f.item): f for f in errors.event_findings(scan.groups, catalogue, {})}
    assert rows[("PCI 0000:3b:00", "XID 45")].verdict == WARN
    assert "restart Fabric Manager" in rows[("PCI 0000:3b:00", "XID 45")].reason
    assert rows[("PCI 0000:86:00", "XID 45")].verdict == INFO
    assert rows[("PCI 0000:86:00", "XID 94")].verdict == WARN  # RESTART_APP
    assert rows[("PCI 0000:af:00", "XID 154")].verdict == FAIL
    assert rows[("PCI 0000:af:00", "XID 154")].details["action"] == "reboot the node"
    assert rows[("PCI 0000:af:00", "XID 173")].verdict == WARN
    assert rows[("PCI 0000:18:00", "XID 13")].verdict == WARN
    fatal = rows[("NVSwitch 0 (0000:05:00.0)", "SXid 20034")]
    assert fatal.verdict == FAIL and fatal.value == 1  # its Severity and Data lines are not events
    assert "Fabric Manager" in (fatal.limit_source or "")
    assert rows[("NVSwitch 3 (0000:c1:00.0)", "SXid 28006")].verdict == INFO


class FunctionsOnly:
    """An NVML stand-in that lends only its functions: the link bound must be nvml.h's own."""

    def __init__(self, inner: FakeNvmlErrors) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def test_every_link_nvml_can_number_is_read_not_a_typed_count(tmp_path: Path) -> None:
    """A GPU with more links than an H100's 18: pynvml.NVML_NVLINK_MAX_LINKS bounds the read."""
    import pynvml

    links = pynvml.NVML_NVLINK_MAX_LINKS
    assert links > 18, "nvidia-ml-py names fewer links than this test plants"
    errors_on = links - 1
    per_link = {str(i): dict.fromkeys(NVLINK_COUNTERS.values(), 0) for i in range(links)}
    per_link[str(errors_on)]["replay"] = 7
    path = readings_file(tmp_path, [{"bus_id": GPU0, "nvlink": [pynvml.NVML_NVLINK_VERSION_5_0]
                                     * links, "nvlink_errors": per_link, "pcie_replays": 0}])
    [gpu] = nvml_errors.read_all(FunctionsOnly(AtBus(path)))
    assert len(gpu.nvlinks) == links
    assert [link.link for link in gpu.nvlinks if link.total()] == [errors_on]
