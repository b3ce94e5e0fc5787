"""Baselines over time: each host against its own accepted record, and its figures run by run.

Runs are written as `accept.yml` leaves them (`<dir>/<run>/<host>.json`); the first report
with `--baselines` makes the passing hosts' records their baselines, later ones compare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.records import record, write
from workloads.cli import main
from workloads.fleet.command import render_fleet

FIRST, SECOND, THIRD = "20261125T000000Z", "20261202T000000Z", "20261209T000000Z"


def _run(root: Path, name: str, scales: list[float], **kwargs: Any) -> Path:
    started = f"{name[:4]}-{name[4:6]}-{name[6:8]}T00:00:00Z"
    records = []
    for i, scale in enumerate(scales):
        rec = record(f"h{i}", gpus=2, scale=scale, **kwargs)
        rec["started_at"] = started
        records.append(rec)
    return write(root / name, records)


def _verdicts(root: Path, run: Path, **kwargs: Any) -> dict[str, tuple[str, list[str]]]:
    fleet, _ = render_fleet(run, None, root / "baselines", **kwargs)
    return {v.host: (v.verdict, v.reasons) for v in fleet.verdicts}


def test_a_host_drifting_below_its_baseline_warns_while_its_siblings_drifted_too(
        tmp_path: Path) -> None:
    """Siblings 3 % down, the host 7 % down: 4 % below its group (no outlier), 7 % below
    its own accepted figures: warn, in one line."""
    _verdicts(tmp_path, _run(tmp_path, FIRST, [1.0, 1.0, 1.0, 1.0]))
    assert sorted(p.name for p in (tmp_path / "baselines").iterdir()) == [
        "h0.json", "h1.json", "h2.json", "h3.json"]
    verdicts = _verdicts(tmp_path, _run(tmp_path, SECOND, [0.97, 0.97, 0.93, 0.97]))
    assert verdicts["h2"] == ("warn", ["warn: GPUs 0–1 and the host: 7 % below its baseline of "
                                       "2026-11-25T00:00:00Z on all 7 checks"])
    assert {verdicts[h][0] for h in ("h0", "h1", "h3")} == {"pass"}


def test_a_fleet_that_moved_together_warns_on_every_host(tmp_path: Path) -> None:
    """The fleet's median moved with every host: the siblings see nothing, the baselines do."""
    _verdicts(tmp_path, _run(tmp_path, FIRST, [1.0, 1.0, 1.0, 1.0]))
    verdicts = _verdicts(tmp_path, _run(tmp_path, SECOND, [0.94, 0.94, 0.94, 0.94]))
    assert {v for v, _ in verdicts.values()} == {"warn"}


def test_30_percent_below_its_baseline_fails(tmp_path: Path) -> None:
    _verdicts(tmp_path, _run(tmp_path, FIRST, [1.0, 1.0]))
    verdicts = _verdicts(tmp_path, _run(tmp_path, SECOND, [0.6, 0.6]))
    assert verdicts["h0"][0] == "fail"
    assert verdicts["h0"][1][0].startswith("fail: GPUs 0–1 and the host: 40 % below its baseline")


def test_a_host_alone_that_lost_a_gpu_or_a_link_fails_against_its_baseline(
        tmp_path: Path) -> None:
    write(tmp_path / FIRST, [record("solo", gpus=8, links=18, link_verdict="info")])
    _verdicts(tmp_path, tmp_path / FIRST)
    write(tmp_path / SECOND, [record("solo", gpus=7, links={2: 16}, link_verdict="info")])
    verdict, reasons = _verdicts(tmp_path, tmp_path / SECOND)["solo"]
    assert verdict == "fail"
    assert reasons == ["fail: 7 GPUs where its baseline has 8",
                       "fail: NVLink: 16 links up on GPU 2 where its baseline has 18"]


def test_baselines_are_written_once_for_passing_hosts_and_renewed_on_request(
        tmp_path: Path) -> None:
    baselines = tmp_path / "baselines"
    _verdicts(tmp_path, _run(tmp_path, FIRST, [1.0, 1.0, 1.0, 0.5]))  # h3 fails: no baseline
    assert sorted(p.stem for p in baselines.glob("*.json")) == ["h0", "h1", "h2"]
    first = (baselines / "h0.json").read_bytes()
    assert first == (tmp_path / FIRST / "h0.json").read_bytes()  # the record as fetched
    _verdicts(tmp_path, _run(tmp_path, SECOND, [0.99, 0.99, 0.99, 0.99]))
    assert (baselines / "h0.json").read_bytes() == first  # kept: drift accumulates against it
    assert (baselines / "h3.json").is_file()  # h3 passed now: its first accepted record
    _verdicts(tmp_path, _run(tmp_path, THIRD, [0.98, 0.98, 0.98, 0.98]), renew=True)
    assert (baselines / "h0.json").read_bytes() == (tmp_path / THIRD / "h0.json").read_bytes()


def test_a_baseline_of_other_hardware_is_not_compared_and_is_replaced(tmp_path: Path) -> None:
    _verdicts(tmp_path, _run(tmp_path, FIRST, [1.0] * 3, model="NVIDIA A100-SXM4-80GB"))
    verdicts = _verdicts(tmp_path, _run(tmp_path, SECOND, [0.5] * 3))  # H100s now: no drift
    assert {v for v, _ in verdicts.values()} == {"pass"}
    assert "H100" in json.loads((tmp_path / "baselines" / "h0.json").read_text())["env"]["gpus"][0]


def test_a_host_name_that_is_no_plain_file_name_gets_no_baseline(tmp_path: Path) -> None:
    run = _run(tmp_path, FIRST, [1.0, 1.0, 1.0])
    rec = json.loads((run / "h0.json").read_text())
    rec["host"] = "../../outside"
    (run / "h0.json").write_text(json.dumps(rec))
    _verdicts(tmp_path, run)
    assert sorted(p.name for p in (tmp_path / "baselines").iterdir()) == ["h1.json", "h2.json"]
    assert not (tmp_path.parent / "outside.json").exists()


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`workloads report ARGS` in this process (the CLI's own entry point): code, out, err."""
    code = main(["report", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_history_shows_a_host_drifting_below_its_baseline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, scales in ((FIRST, [1.0, 1.0, 1.0, 1.0]), (SECOND, [0.99, 0.99, 0.96, 0.99]),
                         (THIRD, [0.97, 0.97, 0.93, 0.97])):
        code, _, err = _report(capsys, "--fleet", str(_run(tmp_path, name, scales)),
                               "--baselines", str(tmp_path / "baselines"))
        assert code == 0, err
    code, out, err = _report(capsys, "--history", str(tmp_path))
    assert code == 0, err
    blocks = {block.splitlines()[0].split()[0]: block for block in out.split("\n\n")[1:]}
    drifting = blocks["h2"].splitlines()
    assert drifting[0] == "h2 (NVIDIA H100 80GB HBM3), baseline 2026-11-25T00:00:00Z"
    assert drifting[2].split() == ["verdict", "pass", "pass", "warn"]
    [matmul] = [line for line in drifting if "matmul bfloat16 (worst GPU)" in line]
    assert matmul.split()[4:] == ["700", "700", "672", "651", "-7.0", "%", "←", "5", "%", "or",
                                  "more", "below", "its", "baseline"]
    assert "←" not in blocks["h0"]
    page = (tmp_path / "history.html").read_text()
    assert page.count('data-level="warn"') == 4  # h2's four figures, nobody else's
    assert "<script" not in page and "http" not in page


@pytest.mark.parametrize(("args", "words"), [
    (["--history", "RUN"], "holds records itself: it is one run"),
    (["--history", "NOPE"], "is not a directory"),
    (["--history", "EMPTY"], "holds no runs"),
    (["--baselines", "B"], "--baselines and --renew-baselines go with --fleet"),
    (["--fleet", "RUN", "--renew-baselines"], "--renew-baselines needs --baselines BDIR"),
])
def test_bad_history_and_baseline_arguments_get_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], words: str) -> None:
    run = _run(tmp_path / "runs", FIRST, [1.0])
    (tmp_path / "empty").mkdir()
    paths = {"RUN": str(run), "NOPE": str(tmp_path / "nope"), "EMPTY": str(tmp_path / "empty"),
             "B": str(tmp_path / "b")}
    code, _, err = _report(capsys, *(paths.get(a, a) for a in args))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and words in lines[0], err
