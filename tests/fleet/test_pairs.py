"""The GPU-pair matrix across a fleet: the slowest pair ranked, a bad link one line, drawn in HTML.

Each host's p2p rows are made by the battery's own check (``workloads.accept.p2p``) over a
simulated CUDA driver (cuda-bindings' names) on an HGX H100 whose NVML readings are built
from pynvml's constants: the rows are what a real record holds, not typed here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

from tests.fleet.records import record, write
from tests.host import nvml_boards
from tests.host.fake_cuda_driver import FakeCudaDriver
from tests.host.fake_nvml import FakeNvml
from workloads.accept import p2p
from workloads.accept.checks import Sizes, Target
from workloads.accept.kernels import Device, Kernels
from workloads.fleet.command import render_fleet
from workloads.hardware.copy_engine import CopyEngine, PeerCopy
from workloads.hardware.nvml import Watcher
from workloads.hardware.reference import load

PAIRS = [(i, j) for i in range(8) for j in range(8) if i != j]


class EngineKernels:
    def __init__(self, rates: dict[tuple[int, int], float], targets: list[Target]) -> None:
        driver = FakeCudaDriver(gpus=8, peer_gbps={p: rates.get(p, 380.0) for p in PAIRS},
                                peer_access=set(PAIRS))
        self.engine, self.targets = CopyEngine(driver), targets

    def peer_devices(self) -> list[Device]:
        return [t.device for t in self.targets]

    def peer_rate(self, source: Device, target: Device, nbytes: int, repeats: int) -> PeerCopy:
        return self.engine.peer(source.index, target.index, nbytes, repeats)


def p2p_rows(rates: dict[tuple[int, int], float]) -> list[dict[str, Any]]:
    watcher = Watcher(FakeNvml(nvml_boards.healthy(nvml_boards.H100_SXM5_80GB, 8)))
    targets = [Target(Device("GPU", w.facts.index, w.facts.name, None), w,
                      load().model_for(w.facts.pci_device_id)) for w in watcher.gpus]
    sizes = Sizes(8192, 1, 1, 1, 1, 1, 1, 1, (1,), 1, 1, 1, 1, 256 << 20, 2, 8192)
    kernels = cast(Kernels, EngineKernels(rates, targets))
    findings = p2p.check_p2p(kernels, targets, sizes, load(), lambda _: None)
    return [f.as_dict() for f in findings]


def fleet(tmp_path: Path) -> tuple[dict[str, Any], str]:
    records = []
    for index in range(5):
        rec = record(f"h{index}")
        rec["findings"] += p2p_rows({(2, 5): 150.0} if index == 3 else {})
        records.append(rec)
    run = write(tmp_path / "run", records)
    render_fleet(run, None)
    report = run / "report"
    return json.loads((report / "fleet.json").read_text()), (report / "fleet.html").read_text()


def test_a_bad_link_fails_its_host_in_one_line_and_the_slowest_pair_is_ranked(
    tmp_path: Path,
) -> None:
    verdicts, _ = fleet(tmp_path)
    by_host = {v["host"]: v for v in verdicts["hosts"]}
    assert {h: v["verdict"] for h, v in by_host.items()} == {
        "h0": "pass", "h1": "pass", "h2": "pass", "h3": "fail", "h4": "pass"}
    reasons = by_host["h3"]["reasons"]
    # The pair's own row is the matrix's evidence, never a line of its own.
    assert not [r for r in reasons if r.startswith(("fail: GPU 2 → GPU 5", "warn: GPU 2 → GPU 5"))]
    [battery] = [r for r in reasons if r.startswith("fail: p2p pair matrix")]
    assert "slowest pair GPU 2 → GPU 5 150.0 GB/s" in battery
    [evidence] = [e for r, e in zip(reasons, by_host["h3"]["evidence"], strict=True)
                  if r == battery] or [[]]
    assert any("GPU 2 → GPU 5 150 GB/s" in line for line in [battery, *evidence])
    series = {s["series"] for s in verdicts["stats"]}
    assert "p2p pair matrix on GPUs ×8" in series


def test_the_report_draws_the_bad_host_s_matrix_first_and_open(tmp_path: Path) -> None:
    _, page = fleet(tmp_path)
    section = page[page.index('<section id="pairs">'):]
    first = section.index('data-host="h3"')
    assert first < section.index('data-host="h0"')
    assert '<details class="pairs" data-host="h3" open>' in section
    assert ('<td class="fail" data-from="GPU 2" data-to="GPU 5">150</td>' in section)
    assert section.count('class="fail"') == 1
