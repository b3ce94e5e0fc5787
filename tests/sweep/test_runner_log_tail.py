"""A failed run's reason is read from its log's tail: a log of gigabytes costs what a page does.

The runner took the whole log (``read_text().splitlines()``) to find the last
``error:`` line. The family: sparse logs of 1 to 8 GiB (the size of a run that printed
every step; sparse so the test writes nothing), the error line at their end, and a FIFO
and a link at the log's name; each read in a child with ``RLIMIT_AS`` of 1 GiB.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from workloads.sweep.runner import _last_error_line
print(repr(_last_error_line(Path(sys.argv[2]))))
"""


def _last_line_in_child(log: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(log)], text=True,
                          capture_output=True, timeout=60, check=False)


@pytest.mark.parametrize("gib", [1, 3, 8])
def test_the_error_line_of_a_huge_log_is_found_in_bounded_memory(tmp_path: Path,
                                                                  gib: int) -> None:
    log = tmp_path / "run.log"
    with log.open("wb") as fh:
        fh.truncate(gib << 30)
        fh.seek(0, os.SEEK_END)
        fh.write(b"\nworkloads style: error: out of memory; use a smaller --width\nbye\n")
    done = _last_line_in_child(log)
    assert done.returncode == 0, done.stderr[-300:]
    assert done.stdout.strip() == repr("workloads style: error: out of memory; use a smaller "
                                       "--width")


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_a_log_that_is_not_a_file_gives_no_reason(tmp_path: Path, kind: str) -> None:
    log = tmp_path / "run.log"
    if kind == "fifo":
        os.mkfifo(log)
    else:
        (tmp_path / "elsewhere").write_text("x: error: not this one\n")
        log.symlink_to(tmp_path / "elsewhere")
    done = _last_line_in_child(log)
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr[-300:]
