"""Figures from records: scaling curves, GPU utilisation over time, CPU-vs-GPU throughput.

The three scaling figures are the ones seed 002 drew (epoch time, images/s and
speedup against the GPU count, speedup with the ideal line); the utilisation
chart is seed 004's view of a run; the throughput bars are seeds 000/001's CPU
vs GPU comparison. Each function writes one PNG and returns its path. Figures
use matplotlib's Agg backend: no display is needed on a GPU host or in CI.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tfhost.scaling import ScalePoint
from workloads import safefs

DPI = 120
CPU_COLOUR = "#4c72b0"
GPU_COLOUR = "#55a868"


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    try:
        with safefs.writing(path) as fh:  # never through a link planted at the name
            fig.savefig(fh, format=path.suffix.lstrip(".") or "png", dpi=DPI)
    finally:
        _pyplot().close(fig)
    return path


def _count_axis(ax: Any, counts: Sequence[int], unit: str) -> None:
    ax.set_xlabel(f"number of {unit}")
    ax.set_xticks(list(counts))
    ax.grid(True, alpha=0.3)


def scaling_figures(points: Sequence[ScalePoint], unit: str, out_dir: Path,
                    title: str = "") -> list[Path]:
    """``epoch_time.png``, ``images_per_sec.png`` and ``speedup.png`` in ``out_dir``."""
    plt = _pyplot()
    counts = [p.count for p in points]
    suffix = f"\n{title}" if title else ""
    colour = GPU_COLOUR if unit == "GPUs" else CPU_COLOUR
    paths = []

    for name, ylabel, what, values in (
        ("epoch_time.png", "epoch time (s)", "Epoch time", [p.epoch_time_s for p in points]),
        ("images_per_sec.png", "images/s", "Throughput", [p.images_per_sec for p in points]),
    ):
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(counts, values, "o-", color=colour)
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, _headroom(values))
        ax.set_title(f"{what} vs {unit}{suffix}")
        _count_axis(ax, counts, unit)
        paths.append(_save(fig, out_dir / name))

    fig, ax = plt.subplots(figsize=(6, 4))
    base = counts[0]
    ax.plot(counts, [c / base for c in counts], "--", color="grey", label="ideal (linear)")
    ax.plot(counts, [p.speedup for p in points], "o-", color=colour, label="measured")
    for p in points:
        ax.annotate(f"{p.efficiency:.0%}", (p.count, p.speedup), textcoords="offset points",
                    xytext=(0, 8), ha="center", fontsize=8)
    ax.set_ylabel(f"speedup (relative to {base})")
    ax.set_ylim(0, _headroom([*(p.speedup for p in points), counts[-1] / base]))
    ax.set_title(f"Speedup vs {unit} (labels: scaling efficiency){suffix}")
    ax.legend()
    _count_axis(ax, counts, unit)
    paths.append(_save(fig, out_dir / "speedup.png"))
    return paths


def utilisation_figure(samples: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """SM and memory utilisation (top), memory used and power (bottom) per GPU over time."""
    plt = _pyplot()
    fig, (top, middle, bottom) = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    gpus = sorted({int(s["gpu"]) for s in samples if s.get("gpu") is not None})
    palette = plt.get_cmap("tab10")
    for n, gpu in enumerate(gpus):
        rows = [s for s in samples if s.get("gpu") == gpu]
        t = [r["time_s"] for r in rows]
        colour = palette(n % 10)  # one colour per GPU in every panel
        top.plot(t, [r.get("sm_percent") for r in rows], color=colour, label=f"GPU {gpu} SM")
        top.plot(t, [r.get("memory_percent") for r in rows], "--", color=colour,
                 label=f"GPU {gpu} memory")
        middle.plot(t, [_gib(r.get("memory_used_mib")) for r in rows], color=colour,
                    label=f"GPU {gpu}")
        bottom.plot(t, [r.get("power_w") for r in rows], color=colour, label=f"GPU {gpu}")
    top.set_ylabel("utilisation (%)")
    top.set_ylim(0, 110)
    middle.set_ylabel("memory used (GiB)")
    middle.set_ylim(bottom=0)
    bottom.set_ylabel("power (W)")
    bottom.set_ylim(bottom=0)
    bottom.set_xlabel("time since start (s)")
    for ax in (top, middle, bottom):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower right", ncol=2)
    top.set_title(f"GPU utilisation over time{': ' + title if title else ''}")
    return _save(fig, path)


def throughput_bars(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """One bar per configuration: images/s, CPU and GPU runs in two colours.

    ``rows`` have ``label``, ``kind`` ("CPU" or "GPU"), ``images_per_sec`` and
    optionally ``mfu``, printed under the rate as a percentage of the measured peak.
    """
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(rows) + 2), 4.5))
    labels = [r["label"] for r in rows]
    values = [r["images_per_sec"] for r in rows]
    colours = [GPU_COLOUR if r["kind"] == "GPU" else CPU_COLOUR for r in rows]
    bars = ax.bar(range(len(rows)), values, color=colours)
    for bar, value, row in zip(bars, values, rows, strict=True):
        mfu = row.get("mfu")
        text = f"{value:,.0f}" + (f"\nMFU {mfu:.0%}" if isinstance(mfu, (int, float)) else "")
        ax.annotate(text, (bar.get_x() + bar.get_width() / 2, value),
                    textcoords="offset points", xytext=(0, 3), ha="center", fontsize=8)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("images/s (steady state)")
    if min(values) > 0 and max(values) / min(values) > 50:  # CPU bars would vanish
        ax.set_yscale("log")
        ax.set_ylabel("images/s (steady state, log scale)")
    ax.set_title("CIFAR-10 training throughput, CPU vs GPU")
    kinds = [k for k in ("CPU", "GPU") if any(r["kind"] == k for r in rows)]
    handles = [plt.Rectangle((0, 0), 1, 1, color=CPU_COLOUR if k == "CPU" else GPU_COLOUR)
               for k in kinds]
    ax.legend(handles, kinds)
    if ax.get_yscale() == "linear":
        ax.set_ylim(0, _headroom(values))
    else:
        ax.set_ylim(min(values) / 2, max(values) * 3)
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, path)


def _headroom(values: Iterable[float]) -> float:
    """Upper y limit leaving room above the highest point for markers and labels."""
    return max([*values, 0.0]) * 1.15 or 1.0


def _gib(mib: float | None) -> float | None:
    return None if mib is None else mib / 1024
