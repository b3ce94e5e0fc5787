"""How long the quick check takes on the NVML stand-in: an 8-GPU H100 node, every reading.

Not a test (no timed assertions): it prints figures for docs/benchmarks.md.

  PYTHONPATH=. .venv/bin/python tests/workloads/bench_health_quick.py

Each run is ``workloads health --json`` in this process (command.run: the state file and its
lock, the kernel log, sysfs, NVML through the stand-in with its NVLink, NVLink5, clock and PCIe
readings), repeated; then the console script as slurmd's program would start it (Python's
start included), where NVML is this machine's (no GPU: NVML does not open).
"""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from tests.workloads import kernel_log_fixture as klog
from tests.workloads.sysfs_fixture import pci_tree
from tests.workloads.test_accept_errors import AtBus, readings_file, zero_links
from workloads.accept.health import command
from workloads.cli import build_parser
from workloads.hardware import kernel_log

RUNS = 20


def main() -> None:
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        buses = [f"0000:{b:02x}:00.0" for b in (0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb)]
        gpus = [{"bus_id": f"0000{b}".upper(),
                 "nvlink_errors": zero_links(), "pcie_replays": 0, "remapped_rows": [0, 0, 0, 0],
                 "serial": f"16549220065{i:02d}",
                 "pcie": {"max_width": 16, "max_generation": 5, "gpu_max_generation": 5},
                 "readings": [{"sm": 0, "mem": 0, "pcie_width": 16, "pcie_gen": 5,
                               "reasons": 1}]} for i, b in enumerate(buses)]
        nvml_file = readings_file(tmp, gpus)
        sysfs = pci_tree(tmp / "sys", dict.fromkeys(buses))
        log = klog.write(tmp / "kern.log", klog.noise(1.0, 2000))
        boot = tmp / "boot_id"
        boot.write_text("6f1d2c1e-0000-4000-8000-000000000001\n")
        args = ["health", "--json", "--kernel-log", str(log), "--sysfs-pci", str(sysfs),
                "--state", str(tmp / "state" / "s.json"), "--expect-gpus", "8"]
        times = []
        with mock.patch.object(kernel_log, "BOOT_ID", boot):
            for _ in range(RUNS):
                parsed = build_parser().parse_args(args)
                out = io.StringIO()
                start = time.perf_counter()
                with contextlib.redirect_stdout(out):
                    code = command.run(parsed, nvml=AtBus(nvml_file))
                times.append(time.perf_counter() - start)
        record = json.loads(out.getvalue())
        assert code == 0 and record["verdict"] == "pass", record["verdict"]
        rows = len(record["findings"])
        cli = []
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run([str(Path(sys.executable).parent / "workloads"), *args], check=False,
                           capture_output=True, env={"PYTHONPATH": str(Path.cwd())})
            cli.append(time.perf_counter() - start)
    print(f"quick check, 8-GPU stand-in, in process: median {statistics.median(times):.3f} s, "
          f"max {max(times):.3f} s over {RUNS} runs ({rows} rows, 2,000-line kernel log)")
    print(f"quick check, console script (Python start, no GPU here): median "
          f"{statistics.median(cli):.2f} s, max {max(cli):.2f} s over 5 runs")


if __name__ == "__main__":
    main()
