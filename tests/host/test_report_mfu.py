"""MFU beside images/s: the report's run table, the throughput rows and their bar chart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.host.test_report import _png_size, _write


def _record(rate: float, mfu: float | None) -> dict[str, Any]:
    from workloads.records import new_record

    return new_record(
        "cifar10",
        status="ok",
        model="cnn",
        backend="tensorflow",
        data="synthetic",
        devices=["AMD EPYC 9B14"],
        replicas=1,
        global_batch_size=128,
        precision="mixed",
        xla=False,
        examples_per_sec=rate,
        flops_per_example=1.07e8,
        peak_flops=2.4e11,
        mfu=mfu,
        env={"cpu": "AMD EPYC 9B14", "gpus": []},
    )


def test_mfu_is_a_column_of_the_run_table_and_a_label_on_the_bars(tmp_path: Path) -> None:
    from tfhost.plots import throughput_bars
    from tfhost.report import collect, render_records, throughput_rows

    results = tmp_path / "results"
    _write(results, "cnn-bf16.json", _record(640.0, 0.2853))
    _write(results, "old.json", _record(300.0, None))  # a record from before MFU existed
    render_records([results], tmp_path / "report")
    report = (tmp_path / "report" / "report.md").read_text()
    header = next(line for line in report.splitlines() if line.startswith("| record |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns[columns.index("images/s") + 1] == "MFU"
    assert "| 640.0 | 29% |" in report
    assert "| 300.0 | - |" in report
    rows = throughput_rows(collect([results]).records)
    assert [row["mfu"] for row in rows] == [0.2853]  # the best run of the configuration
    width, _ = _png_size(throughput_bars(rows, tmp_path / "bars.png"))
    assert width >= 600
