"""The contact sheet: one row per varied parameter, its values as columns, each cell a result.

This is the figure of seed 000: along each row one parameter changes while all
others stay at the centre of the star, so the eye reads the parameter's effect
left to right. The centre value is marked in each row; failed runs show their
failure instead of an image, runs not done yet stay blank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads import bounded, safefs
from workloads.sweep.expand import format_value
from workloads.sweep.results import SweepView

CELL_INCHES = 1.5
LABEL_INCHES = 1.4  # room for the parameter names left of the rows
MIN_WIDTH_INCHES = 7.0  # room for the title above a short row
THUMBNAIL_PX = 256
CENTER_COLOUR = "#d62728"


def has_images(view: SweepView) -> bool:
    return any(run.image is not None for run in view.runs)


def render_contact_sheet(view: SweepView, path: Path, subtitle: str = "") -> Path:
    """Draw the sheet to ``path`` (PNG) and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = view.varied
    cols = max(len(view.values[name]) for name in rows)
    aspect = _aspect(view)
    fig, axes = plt.subplots(
        len(rows), cols, squeeze=False,
        figsize=(
            max(MIN_WIDTH_INCHES, cols * CELL_INCHES + LABEL_INCHES),
            len(rows) * (CELL_INCHES * aspect + 0.45) + 0.8,
        ),
    )
    for r, name in enumerate(rows):
        scan = view.scan(name)
        for c in range(cols):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            if c >= len(scan):
                ax.set_visible(False)
                continue
            value, run = scan[c]
            centre = value == view.center.get(name)
            ax.set_title(format_value(value), fontsize=8,
                         color=CENTER_COLOUR if centre else "black",
                         fontweight="bold" if centre else "normal")
            for spine in ax.spines.values():
                spine.set_color(CENTER_COLOUR if centre else "#bbbbbb")
                spine.set_linewidth(2 if centre else 0.5)
            thumbnail = _thumbnail(run.image) if run is not None and run.image else None
            if thumbnail is not None:
                ax.imshow(thumbnail)
            else:
                text = ("not run" if run is None else "image refused" if run.image
                        else f"failed\n{run.failure or ''}")
                ax.set_facecolor("#eeeeee")
                ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=7,
                        color="#b00000" if run is not None else "#777777",
                        transform=ax.transAxes)
                ax.set_aspect(aspect)
        axes[r][0].set_ylabel(name, fontsize=9, rotation=0, ha="right", va="center")
    title = (f"{view.workload} {view.mode} sweep: one parameter per row, "
             "the others at the centre (red)")
    fig.suptitle(title + (f"\n{subtitle}" if subtitle else ""), fontsize=10)
    fig.tight_layout()
    try:
        with safefs.writing(path) as fh:  # never through a link planted at the name
            fig.savefig(fh, format="png", dpi=100)
    finally:
        plt.close(fig)
    return path


def _thumbnail(path: Path) -> Any:
    """A run's image shrunk to a cell, or None if the reader refuses it (over its caps)."""
    try:
        with bounded.open_image(path) as img:  # pixel count checked before decoding
            img.thumbnail((THUMBNAIL_PX, THUMBNAIL_PX))
            return img.convert("RGB")
    except (bounded.BadInput, OSError):
        return None


def _aspect(view: SweepView) -> Any:
    """Height/width of the results' images (the first one read), for cell shapes."""
    for run in view.runs:
        if run.image is not None:
            try:
                with bounded.open_image(run.image) as img:  # only the header is read
                    return img.height / img.width
            except (bounded.BadInput, OSError):
                continue
    return 1.0
