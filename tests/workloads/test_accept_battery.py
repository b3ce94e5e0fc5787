"""The battery's GPU path without a GPU: recorded NVML readings and recorded kernel figures.

Five H100 SXM GPUs (``nvml_boards.five_h100_one_fault_each``, built from pynvml's
constants and pci.ids: one healthy, then a link at x8, a
clock held at 700 MHz, a pending row remap, 12 of 18 NVLinks) and a measurement
layer that returns figures an HGX H100 gives, one GPU's matmul 40 % low. The
runner, the device-to-NVML mapping, the limits from the reference table, the
sibling rule, the table and the exit code run as in production; only the two
things that need hardware (NVML and the kernels) are recorded.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import pytest

from tests.host import nvml_boards
from tests.host.fake_nvml import FakeNvml
from workloads.accept import battery, checks, output
from workloads.accept.kernels import Device
from workloads.accept.verdicts import FAIL, PASS, Finding
from workloads.hardware import identify
from workloads.hardware.reference import load

READINGS = nvml_boards.five_h100_one_fault_each()
NAME = "NVIDIA H100 80GB HBM3"
# TFLOP/s an H100 SXM reaches at 8192² (about 75 % of the datasheet on the tensor cores).
MATMUL = {"float32": 52e12, "tensorfloat32": 370e12, "bfloat16": 740e12, "float16": 745e12}


class RecordedKernels:
    """The backend layer's interface with recorded figures of an HGX H100."""

    backend = "recorded"
    transfer_pinned = True
    transfer_method = "recorded figures of pinned copies"

    def devices(self) -> list[Device]:
        return [Device("GPU", i, NAME, f"/GPU:{i}", (9, 0)) for i in range(5)]

    def collective_devices(self) -> list[Any]:
        return list(range(5))

    def placed(self, device: Device, dtype: str) -> Any:
        return nullcontext()

    def copy_rate(self, device: Device, nbytes: int, repeats: int, rounds: int) -> float:
        return 3.0e12

    def transfer_rate(self, device: Device, nbytes: int, repeats: int, to_device: bool) -> float:
        return 24e9 if device.index == 1 else 48e9  # the x8 link moves half

    def allreduce_time(self, nbytes: int, iterations: int) -> float:
        busbw = 250e9 if nbytes >= 1 << 30 else 40e9  # smaller sizes are latency-bound
        return nbytes / (busbw / (2 * 4 / 5))


def fake_matmul(kernels: Any, device: Device, dtype: str, *_: int) -> float:
    return MATMUL[dtype] * (0.6 if device.index == 2 else 1.0)


@pytest.fixture(scope="module")
def outcome() -> battery.Outcome:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checks, "matmul_rate", fake_matmul)
        # every GPU visible, whatever this shell's CUDA_VISIBLE_DEVICES: the battery's lookup
        # of it, not the process's environment (the background jobs' children read that)
        patch.setattr(identify, "cuda_visible", lambda: None)
        return battery.run(
            ["matmul", "membw", "transfer", "allreduce", "nvml"],
            False,
            1,
            "recorded",
            load(),
            battery.Progress(enabled=False),
            nvml=FakeNvml(READINGS),
            kernels=RecordedKernels(),
        )


def rows(outcome: battery.Outcome, check: str, device: str | None = None) -> list[Finding]:
    return [
        f for f in outcome.findings if f.check == check and (device is None or f.device == device)
    ]


def test_every_gpu_is_matched_to_its_datasheet(outcome: battery.Outcome) -> None:
    assert [d["model"] for d in outcome.devices] == ["H100 SXM5 80GB"] * 5
    assert [d["pci_device_id"] for d in outcome.devices] == ["0x2330"] * 5
    assert outcome.unknown_gpus == [] and outcome.sizes.matmul == 8192


def test_matmul_rows_are_judged_against_the_dense_datasheet_peaks(
    outcome: battery.Outcome,
) -> None:
    gpu0 = {f.item.split()[0]: f for f in rows(outcome, "matmul", "GPU 0")}
    assert list(gpu0) == ["float32", "tensorfloat32", "bfloat16", "float16"]
    assert gpu0["bfloat16"].limit == 989.5 and gpu0["bfloat16"].verdict == PASS
    assert gpu0["bfloat16"].fraction == pytest.approx(740 / 989.5)
    assert (
        gpu0["bfloat16"].reason
        == "75% of 990 TFLOP/s (H100 SXM5 80GB datasheet [h100-datasheet, 2023-09])"
    )


def test_the_slow_gpu_is_named_against_its_siblings(outcome: battery.Outcome) -> None:
    slow = rows(outcome, "matmul", "GPU 2")
    assert {f.verdict for f in slow} == {FAIL}
    assert all(f.reason.startswith("40% slower than its siblings") for f in slow)
    assert {f.verdict for f in rows(outcome, "matmul", "GPU 3")} == {PASS}


def test_transfers_are_held_to_the_link_nvml_reports(outcome: battery.Outcome) -> None:
    [h2d, d2h] = rows(outcome, "transfer", "GPU 0")
    assert h2d.item == "host→device 256 MiB" and d2h.item == "device→host 256 MiB"
    assert h2d.limit == pytest.approx(3.938 * 16) and h2d.verdict == PASS
    assert h2d.limit_source and h2d.limit_source.startswith("PCIe Gen5 x16")
    x8 = rows(outcome, "transfer", "GPU 1")
    assert all(f.fraction == pytest.approx(24 / 63.008) for f in x8)


def test_the_allreduce_is_held_to_the_weakest_nvlink(outcome: battery.Outcome) -> None:
    best = rows(outcome, "allreduce")[-1]
    assert best.item == "best busbw (1 GiB)" and best.value == pytest.approx(250.0)
    assert best.limit == 12 * 25  # GPU 4 has 12 of its 18 links up
    assert best.limit_source and best.limit_source.startswith("NVLink 4 × 12 links per GPU")
    assert best.verdict == PASS
    sizes = [f.item for f in rows(outcome, "allreduce")[:-1]]
    assert sizes == ["1 MiB", "4 MiB", "16 MiB", "64 MiB", "256 MiB", "1 GiB"]


def test_each_faulty_gpu_fails_on_its_own_finding(outcome: battery.Outcome) -> None:
    nvml = {(f.device, f.item): f for f in rows(outcome, "nvml")}
    assert nvml[("GPU 1", "PCIe link")].verdict == FAIL
    assert nvml[("GPU 2", "SM clock")].verdict == FAIL
    assert nvml[("GPU 2", "throttling")].verdict == FAIL
    assert nvml[("GPU 3", "memory errors")].verdict == FAIL
    assert nvml[("GPU 4", "NVLink")].verdict == FAIL
    healthy = [f for (device, _), f in nvml.items() if device == "GPU 0"]
    assert {f.verdict for f in healthy} == {PASS}


def test_the_table_and_the_exit_code(
    outcome: battery.Outcome, capsys: pytest.CaptureFixture[str]
) -> None:
    assert output.exit_code(outcome.findings) == 1
    fields = output.record_fields(outcome, False, ["matmul"], 1)
    assert fields["verdict"] == FAIL and fields["counts"]["fail"] >= 9
    output.print_table(outcome, "workloads accept (full, recorded)")
    text = capsys.readouterr().out
    assert "x8 of x16" in text and "40% slower than its siblings" in text
    assert text.rstrip().splitlines()[-1].startswith("FAIL: ")
