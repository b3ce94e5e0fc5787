"""The sweep database is a pickle: it is read only from files nobody else can write.

Each test plants a ``database.pk`` whose pickle would create a file when read,
so "refused before reading" is checked by that file never appearing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sweep.conftest import fake_spec, sweep_cli
from workloads.errors import WorkloadError
from workloads.sweep.database import SweepDatabase

NOBODY = 65534


def plant(directory: Path, tmp_path: Path) -> Path:
    """A sweep directory (0755) holding a hostile database.pk (0644); the file it would create."""
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    target = tmp_path / "pwned"
    (directory / "database.pk").write_bytes(f"cbuiltins\nopen\n(V{target}\nVw\ntR.".encode())
    (directory / "database.pk").chmod(0o644)
    return target


def test_a_group_writable_database_is_refused_on_the_command_line(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    directory = tmp_path / "d"
    target = plant(directory, tmp_path)
    (directory / "database.pk").chmod(0o664)
    result = sweep_cli([str(fake_spec(tmp_path)), "--dir", str(directory)], sweep_env)
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "writable by its group (mode 664)" in errors[0] and "chmod go-w" in errors[0]
    assert not target.exists()


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    directory = tmp_path / "d"
    target = plant(directory, tmp_path)
    directory.chmod(mode)
    with pytest.raises(WorkloadError, match=r"sweep directory .* is writable by"):
        SweepDatabase(directory).read()
    assert not target.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root")
@pytest.mark.parametrize("owned", ["database.pk", "."])
def test_a_database_or_directory_of_another_user_is_refused(tmp_path: Path, owned: str) -> None:
    directory = tmp_path / "d"
    target = plant(directory, tmp_path)
    os.chown(directory / owned, NOBODY, NOBODY)
    with pytest.raises(WorkloadError, match=rf"is owned by uid {NOBODY}, not by you"):
        SweepDatabase(directory).read()
    assert not target.exists()


def test_a_new_sweep_directory_is_private_to_writers_whatever_the_umask(
    tmp_path: Path, sweep_env: dict[str, str]
) -> None:
    directory = tmp_path / "new"
    result = sweep_cli([str(fake_spec(tmp_path)), "--dir", str(directory), "--dry-run"],
                       sweep_env, umask=0o002)
    assert result.returncode == 0, result.stderr
    assert directory.stat().st_mode & 0o777 == 0o755


def test_a_database_whose_pickle_asks_for_a_huge_memo_is_refused_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """Trusted is not well-formed: the opcodes are walked before psweep's pickle is loaded."""
    import struct
    import tracemalloc

    directory = tmp_path / "d"
    directory.mkdir(mode=0o755)
    directory.chmod(0o755)
    (directory / "database.pk").write_bytes(b"\x80\x02Nr" + struct.pack("<I", 2**24) + b".")
    (directory / "database.pk").chmod(0o644)
    tracemalloc.start()
    try:
        with pytest.raises(WorkloadError, match="uses memo index 16777216 with only 1 memo"):
            SweepDatabase(directory).read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"{peak / 2**20:.0f} MiB"
