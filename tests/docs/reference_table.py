"""The per-card tables of docs/benchmarks.md, written from workloads/hardware/reference.yaml.

Why generated: the figures a user compares a card with are the battery's own limits; a table
typed by hand drifts from the data the battery judges by. ``python tests/docs/reference_table.py``
prints both tables; tests/docs/test_docs.py fails when the page's copy differs, and says to
paste this output.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "workloads" / "hardware" / "reference.yaml"
DTYPES = ("float32", "tensorfloat32", "bfloat16", "float16")


def _figure(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "–"
    value = entry["value"]
    return f"{int(value):,}" if float(value).is_integer() else f"{value:,}"


def _percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def _nvlink(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "–"
    text = f"{entry['links']} × NVLink {entry['generation']}"
    return text + " (where fitted)" if entry.get("optional") else text


def card_table(data: dict[str, Any]) -> str:
    """One row per GPU model: its dense matmul peaks, memory bandwidth and NVLinks."""
    lines = [
        "| GPU | float32 | TF32 | bfloat16 | float16 | memory GB/s | NVLinks | source |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for gpu in data["gpus"]:
        peaks = gpu["matmul_tflops"]
        figures = [*peaks.values(), gpu["memory_gbps"]]  # a null bandwidth: no figure to judge
        sources = sorted({e["source"] for e in figures if e})
        lines.append(
            f"| {gpu['model']} | "
            + " | ".join(_figure(peaks.get(dtype)) for dtype in DTYPES)
            + f" | {_figure(gpu['memory_gbps'])} | {_nvlink(gpu.get('nvlink'))} | "
            + ", ".join(f"`{s}`" for s in sources) + " |"
        )
    return "\n".join(lines)


def threshold_table(data: dict[str, Any]) -> str:
    """One row per judged figure: below which fraction of its limit a row warns, and fails."""
    lines = ["| figure | warn below | fail below |", "| --- | ---: | ---: |"]
    for name, rule in data["thresholds"].items():
        if "warn_below" in rule:
            warn, fail = _percent(rule["warn_below"]), _percent(rule["fail_below"])
            lines.append(f"| `{name}` | {warn} | {fail} |")
        else:
            lines.append(f"| `{name}` | above {_percent(rule['warn_above'])} | |")
    return "\n".join(lines)


def tables(path: Path = REFERENCE) -> str:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return card_table(data) + "\n\n" + threshold_table(data)


if __name__ == "__main__":
    print(tables())
