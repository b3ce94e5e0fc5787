"""run-workloads.sh with Apptainer: the bind library it mounts into the container is its own.

The script builds workloads/netbind's library on the host (images carry no
compiler) and mounts it into the container. Apptainer is not installed here; a
stand-in on PATH records the command line it was given, which is all this test
reads (the library's use inside the worker is tests/workloads/test_netbind_planted.py).
Each case plants a library at the old shared path and, in one of the states an
attacker or an accident leaves, at the private one; the mounted file must then be
the script's own verified build, or the script stops with one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.slurm.conftest import REPO

SCRIPT = REPO / "scripts" / "slurm" / "run-workloads.sh"
SOURCE = REPO / "workloads" / "netbind" / "bindaddr.c"
NAME = f"libbindaddr-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]}.so"
OTHER_UID = 65534
PLANTED = b"\x7fELF planted bytes"
STAND_IN = """#!/usr/bin/env python3
import json, os, sys
print(json.dumps({"argv": sys.argv[1:],
                  "shim": os.environ.get("APPTAINERENV_WORKLOADS_BIND_SHIM")}))
"""


def _digest(data: bytes) -> str:
    return f"{hashlib.sha256(data).hexdigest()}\n"


def _plant(directory: Path, mode: int = 0o755, digest: str | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / NAME
    target.write_bytes(PLANTED)
    target.chmod(mode)
    if digest is not None:
        (directory / f"{NAME}.sha256").write_text(digest)
    return target


def _private(cache: Path) -> Path:
    directory = cache / "tfhost" / f"netbind-{os.geteuid()}"
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    return directory


def _nothing(cache: Path) -> None:
    pass


def _group_writable(cache: Path) -> None:
    _plant(_private(cache), 0o775, _digest(PLANTED))


def _symlink(cache: Path) -> None:
    elsewhere = _plant(cache / "elsewhere", 0o755, _digest(PLANTED))
    private = _private(cache)
    (private / NAME).symlink_to(elsewhere)
    (private / f"{NAME}.sha256").write_text(_digest(PLANTED))


def _other_content(cache: Path) -> None:
    _plant(_private(cache), 0o755, None)


def _stale_digest(cache: Path) -> None:
    _plant(_private(cache), 0o755, _digest(b"an earlier build"))


def _another_users_file(cache: Path) -> None:
    planted = _plant(_private(cache), 0o755, _digest(PLANTED))
    os.chown(planted, OTHER_UID, OTHER_UID)


def _open_directory(cache: Path) -> None:
    _plant(_private(cache), 0o755, _digest(PLANTED))
    _private(cache).chmod(0o777)


def _shared_directory(cache: Path) -> None:
    _plant(_private(cache), 0o755, _digest(PLANTED))
    _private(cache).chmod(0o750)


def _linked_directory(cache: Path) -> None:
    elsewhere = cache / "elsewhere"
    _plant(elsewhere, 0o755, _digest(PLANTED))
    elsewhere.chmod(0o700)
    (cache / "tfhost" / f"netbind-{os.geteuid()}").symlink_to(elsewhere)


def _another_users_directory(cache: Path) -> None:
    private = _private(cache)
    _plant(private, 0o755, _digest(PLANTED))
    os.chown(private, OTHER_UID, OTHER_UID)


def _open_parent(cache: Path) -> None:
    _plant(_private(cache), 0o755, _digest(PLANTED))
    (cache / "tfhost").chmod(0o777)


# name: (plant, the one-line refusal expected (None: a verified build is mounted), root only)
CASES: dict[str, tuple[Callable[[Path], None], str | None, bool]] = {
    "old-shared-path": (_nothing, None, False),
    "group-writable-file": (_group_writable, None, False),
    "symlink-to-elsewhere": (_symlink, None, False),
    "other-content-no-digest": (_other_content, None, False),
    "other-content-stale-digest": (_stale_digest, None, False),
    "file-of-another-user": (_another_users_file, None, True),
    "directory-writable-by-all": (_open_directory, f"netbind-{os.geteuid()} is writable by others",
                                  False),
    "directory-open-to-group": (_shared_directory, "is not private to you (mode 750", False),
    "directory-is-a-symlink": (_linked_directory, "is not a directory", False),
    "directory-of-another-user": (_another_users_directory, "is owned by uid 65534", True),
    "parent-writable-by-all": (_open_parent, "tfhost is writable by others (mode 777)", False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_mounted_bind_library_is_a_verified_private_build(case: str, tmp_path: Path) -> None:
    plant, refusal, needs_root = CASES[case]
    if needs_root and os.geteuid() != 0:
        pytest.skip("planting a file of another user needs root")
    cache = tmp_path / "xdg"
    _plant(cache / "tfhost", 0o777)  # the old shared, predictable path
    for made in (cache, cache / "tfhost"):
        made.chmod(0o755)  # whatever the umask; the cases change what they test
    plant(cache)
    stand_in = tmp_path / "bin" / "apptainer"
    stand_in.parent.mkdir()
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    image = tmp_path / "image.sif"
    image.write_bytes(b"")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "WORKLOADS_", "APPTAINER")) and k != "CC"}
    env.update({"PATH": f"{stand_in.parent}:{env['PATH']}", "XDG_CACHE_HOME": str(cache),
                "WORKLOADS_RUNTIME": "apptainer", "WORKLOADS_IMAGE": str(image),
                "SLURM_STEP_NUM_TASKS": "2"})
    done = subprocess.run([str(SCRIPT), "cifar10", "--distributed", "slurm"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False)
    if refusal is not None:
        assert done.returncode == 2 and not done.stdout, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and refusal in lines[0], done.stderr
        assert "no private directory for the worker bind library" in lines[0]
        return
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    argv = found["argv"]
    mounts = [argv[i + 1] for i, word in enumerate(argv) if word == "--bind"]
    shim_mounts = [m for m in mounts if m.endswith(":/opt/workloads-netbind/libbindaddr.so:ro")]
    assert len(shim_mounts) == 1 and found["shim"] == "/opt/workloads-netbind/libbindaddr.so"
    mounted = Path(shim_mounts[0].split(":", 1)[0])
    assert mounted == cache / "tfhost" / f"netbind-{os.geteuid()}" / NAME
    directory = os.lstat(mounted.parent)
    assert stat.S_ISDIR(directory.st_mode) and stat.S_IMODE(directory.st_mode) == 0o700
    info = os.lstat(mounted)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    assert not info.st_mode & 0o022
    data = mounted.read_bytes()
    assert data != PLANTED and data.startswith(b"\x7fELF")
    assert (mounted.parent / f"{NAME}.sha256").read_text() == _digest(data)
