"""`workloads run IMAGE -- accept` hands the battery this boot's kernel log, and nothing more.

The container runs as an ordinary uid with every capability dropped, so it can read
neither the host's journal nor (where `kernel.dmesg_restrict` is set) the ring buffer.
The runner saves the log on the host as the calling user and mounts that one file
read-only at /kernel.log, appending `--kernel-log /kernel.log` to the battery's command:
the container spec gains a read-only bind and nothing else (no capability, no device).
The host side is the production reader (`kernel_log.save_copy`) reading the driver's own lines
through a command, as `dmesg` prints them; the engine is not needed to build the spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.host import tfhost_cli
from tests.workloads import kernel_log_fixture as klog
from workloads.hardware import kernel_log


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, str | None]]:
    """Each spec the CLI hands the runner, with its kernel log's text as it was then."""
    import tfhost.runner

    seen: list[tuple[Any, str | None]] = []

    def fake_run(spec: Any, **_: Any) -> int:
        text = Path(spec.kernel_log).read_text() if spec.kernel_log else None
        seen.append((spec, text))
        return 0

    monkeypatch.setattr(tfhost.runner, "run", fake_run)
    return seen


def _run(tmp: Path, *command: str) -> int:
    return tfhost_cli.run_in_process(["run", "img", "--gpus", "none", "--results", str(tmp),
                                      "--", *command])


def test_accept_gets_the_saved_log_read_only_and_no_capability(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        runs: list[tuple[Any, str | None]]) -> None:
    from tfhost.runner import container_options

    journal = klog.write(tmp_path / "journal.txt", klog.noise(1.0, 120))
    monkeypatch.setattr(kernel_log, "JOURNAL", ("cat", str(journal)))
    assert _run(tmp_path, "accept", "--quick") == 0
    [(spec, text)] = runs
    assert spec.command == ["accept", "--quick", "--kernel-log", "/kernel.log"]
    assert text == journal.read_text()
    options = container_options(spec)
    assert options["volumes"] == {
        str((tmp_path).resolve()): {"bind": "/results", "mode": "rw"},
        str(Path(spec.kernel_log).resolve()): {"bind": "/kernel.log", "mode": "ro"}}
    assert options["cap_drop"] == ["ALL"] and "cap_add" not in options
    assert "devices" not in options and "privileged" not in options
    assert options["security_opt"] == ["no-new-privileges"]
    assert not Path(spec.kernel_log).exists()  # the saved copy goes with the run


def test_other_commands_and_a_given_kernel_log_are_left_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        runs: list[tuple[Any, str | None]]) -> None:
    monkeypatch.setattr(kernel_log, "JOURNAL", ("cat", "/dev/null"))
    monkeypatch.setattr(kernel_log, "DMESG", ("cat", "/dev/null"))
    assert _run(tmp_path, "check") == 0
    assert _run(tmp_path, "accept", "--kernel-log", "/results/kernel.log") == 0
    assert _run(tmp_path, "accept", "--kernel-log=/results/kernel.log") == 0
    assert [spec.command for spec, _ in runs] == [
        ["check"], ["accept", "--kernel-log", "/results/kernel.log"],
        ["accept", "--kernel-log=/results/kernel.log"]]
    assert all(spec.kernel_log is None for spec, _ in runs)


def test_a_user_who_cannot_read_the_log_is_told_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        runs: list[tuple[Any, str | None]]) -> None:
    monkeypatch.setattr(kernel_log, "JOURNAL", ("false",))
    monkeypatch.setattr(kernel_log, "DMESG", ("false",))
    assert _run(tmp_path, "accept") == 0
    [(spec, _)] = runs
    assert spec.command == ["accept"] and spec.kernel_log is None
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--kernel-log FILE" in lines[0], lines


@pytest.mark.parametrize("form", ["split", "joined"])
def test_a_kernel_log_saved_on_the_host_is_mounted_for_the_battery(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str,
        runs: list[tuple[Any, str | None]]) -> None:
    """`-- accept --kernel-log FILE` with FILE on the host (the fix the runner's own line and
    the row's reason give): the container cannot see FILE, so it is mounted at /kernel.log."""
    monkeypatch.setattr(kernel_log, "JOURNAL", ("false",))  # the host's own: never read
    monkeypatch.setattr(kernel_log, "DMESG", ("false",))
    saved = klog.write(tmp_path / "kern.log", klog.noise(1.0, 30))
    given = ["--kernel-log", str(saved)] if form == "split" else [f"--kernel-log={saved}"]
    assert _run(tmp_path / "results", "accept", *given) == 0
    [(spec, text)] = runs
    assert spec.command == ["accept", "--kernel-log", "/kernel.log"]
    assert Path(spec.kernel_log) == saved and text == saved.read_text()
    assert saved.exists()  # the operator's own file stays
