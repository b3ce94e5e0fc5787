"""The HTML explorer in a real headless Chromium (Debian's): sliders move, the right image shows.

Opened from file:// with every request outside the page recorded: the page must
need no server and fetch nothing (no CDN). The fake workload paints each result
one colour, so the test reads the shown image's pixels to know which run it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.sweep.conftest import fake_spec, read_db, sweep_cli
from workloads.report.sweep_report import render_sweep_report

PIXEL_JS = """async () => {
  const img = document.getElementById("shown");
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.naturalWidth;
  canvas.height = img.naturalHeight;
  const ctx = canvas.getContext("2d");
  ctx.drawImage(img, 0, 0);
  return Array.from(ctx.getImageData(canvas.width >> 1, canvas.height >> 1, 1, 1).data.slice(0, 3));
}"""


def test_sliders_select_the_run_and_its_image_is_shown(
    tmp_path: Path, sweep_env: dict[str, str], page: Any
) -> None:
    spec = fake_spec(tmp_path, vary={"value": [0.25, 0.5, 1.0, -1], "color": ["red", "green"]})
    directory = tmp_path / "d"
    sweep_cli([str(spec), "--dir", str(directory), "--per-device", "2"], sweep_env)
    render_sweep_report(directory)
    ids = {(r["value"], r["color"]): r["_pset_id"] for r in read_db(directory).to_dict("records")}

    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url)
            if not r.url.startswith(("file:", "data:")) else None)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto((directory / "report" / "explorer.html").as_uri())

    def shown() -> tuple[str, list[int]]:
        return page.get_attribute("#shown", "data-pset-id"), page.evaluate(PIXEL_JS)

    assert shown() == (ids[(0.5, "red")], [127, 0, 0])  # opens at the centre of the star
    assert page.text_content("#value-value") == "0.5"

    page.focus("#slider-value")
    page.keyboard.press("ArrowRight")  # value axis: -1, 0.25, 0.5, 1
    assert page.text_content("#value-value") == "1"
    assert shown() == (ids[(1.0, "red")], [255, 0, 0])
    assert "runtime" in page.text_content("#results")

    page.focus("#slider-color")
    page.keyboard.press("ArrowRight")  # (1, green) is off the star: snap to (0.5, green)
    assert shown() == (ids[(0.5, "green")], [0, 127, 0])
    assert page.text_content("#value-value") == "0.5"
    assert "nearest run" in page.text_content("#snap-note")

    page.click(f"#runs tr[data-pset-id='{ids[(-1.0, 'red')]}']")  # the failed run
    assert page.get_attribute("#shown", "data-pset-id") == ids[(-1.0, "red")]
    assert page.is_hidden("#shown")
    assert "--value -1.0 is negative" in page.text_content("#error")

    assert outside == [] and errors == []
