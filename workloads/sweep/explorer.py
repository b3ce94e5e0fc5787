"""The single-file HTML explorer: what seed 000's Binder notebook did, without Jupyter.

Every run's image is embedded as a data URI (small ones byte for byte, larger
ones as a JPEG thumbnail with a link to the full file), next to its parameters,
results and a thinned loss history, in one JSON block read by a few lines of
plain JavaScript. No server, no CDN, nothing fetched: it opens from file://,
from a mail attachment, or from a CI artifact.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from workloads import bounded
from workloads.records import atomic_write_bytes
from workloads.sweep.expand import format_value
from workloads.sweep.progress import format_duration
from workloads.sweep.results import Run, SweepView

EMBED_PX = 384  # images wider than this are embedded as thumbnails of this width
HISTORY_POINTS = 200  # loss-history points per term kept for the plot


def image_data_uri(path: Path) -> str | None:
    """The image as a data URI: unchanged when small, else a JPEG thumbnail; None if refused.

    Read by :mod:`workloads.bounded` (no link followed, size and pixel count capped
    before a pixel is decoded): a run's image is whatever the run's process left.
    """
    try:
        raw = bounded.read_capped(path, bounded.IMAGE_MAX_BYTES)
        img = bounded.image_from_bytes(raw)
    except (bounded.BadInput, OSError):
        return None
    with img:
        if img.width <= EMBED_PX and img.format in ("PNG", "JPEG"):
            mime = "image/png" if img.format == "PNG" else "image/jpeg"
            return f"data:{mime};base64,{base64.b64encode(raw).decode()}"
        small = img.convert("RGB")
        small.thumbnail((EMBED_PX, EMBED_PX * 4))
    buffer = io.BytesIO()
    small.save(buffer, format="JPEG", quality=85)
    return f"data:image/jpeg;base64,{base64.b64encode(buffer.getvalue()).decode()}"


def thin(values: list[Any], points: int = HISTORY_POINTS) -> list[Any]:
    """Every k-th value (and the last), so long histories stay small in the page."""
    if len(values) <= points:
        return values
    step = -(-len(values) // points)
    kept = values[::step]
    return kept if kept[-1] is values[-1] else [*kept, values[-1]]


def explorer_data(view: SweepView, out_dir: Path, metrics: list[str], summary: str,
                  scaling: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON the page reads: axes (slider stops), runs and their positions."""
    axes = [
        {
            "name": name,
            "values": [format_value(v) for v in view.values[name]],
            "center": view.values[name].index(view.center[name])
            if view.center.get(name) in view.values[name] else 0,
        }
        for name in view.varied
    ]
    runs = [_run_data(view, run, out_dir, metrics) for run in view.runs]
    centre_pos = [axis["center"] for axis in axes]
    start = next((i for i, run in enumerate(runs) if run["pos"] == centre_pos), 0)
    return {
        "workload": view.workload,
        "mode": view.mode,
        "summary": summary,
        "axes": axes,
        "runs": runs,
        "start": start,
        "metrics": metrics,
        "scaling": scaling,
    }


def _run_data(view: SweepView, run: Run, out_dir: Path, metrics: list[str]) -> dict[str, Any]:
    pos = view.position(run)
    results = {k.rstrip("_"): _number(v) for k, v in run.results.items() if v is not None}
    first = {name: results.pop(name) for name in metrics if name in results}
    return {
        "id": run.pset_id,
        "pos": [pos[name] for name in view.varied],
        "params": {k: format_value(v) for k, v in run.params.items()},
        "failed": run.failed,
        "failure": run.failure,
        "error": run.error,
        "runtime": format_duration(run.runtime) if run.runtime is not None else "-",
        "results": {**first, **results},  # the workload's key metrics first
        "image": image_data_uri(run.image) if run.image else None,
        "full": os.path.relpath(run.image, out_dir) if run.image else None,
        "history": {k: thin(v) for k, v in run.history().items()},
    }


def _number(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def render_explorer(view: SweepView, path: Path, metrics: list[str], summary: str,
                    scaling: dict[str, Any] | None = None) -> Path:
    """Write the explorer page to ``path`` and return it."""
    data = explorer_data(view, path.parent, [m.rstrip("_") for m in metrics], summary, scaling)
    # "<" escaped inside the JSON, so no value can close the <script> element.
    payload = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    template = resources.files("workloads.sweep").joinpath("explorer.html").read_text()
    title = html.escape(f"{view.workload} sweep: {len(view.runs)} runs")
    page = template.replace("__TITLE__", title).replace("__DATA__", payload)
    atomic_write_bytes(path, page.encode())
    return path
