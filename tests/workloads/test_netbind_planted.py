"""A library planted where workers look for the bind shim is never preloaded.

Each case plants a real shared library (its constructor prints a marker) at
the shim's predictable paths, the old shared one (``$WORKLOADS_CACHE/netbind/``)
and the per-user one (``netbind-<uid>``), in one of the states an attacker or an
accident leaves behind; then a worker takes the real path
(``netbind.keep_workers_on_node``: choose, verify or build, re-execute with
LD_PRELOAD) and reports what LD_PRELOAD names and what /proc/self/maps shows.
The marker must never appear, the preloaded file must be the only bind library
mapped, and it must pass the checks again here, from the outside: a private
directory, a file of the worker's user writable by nobody else, bytes that
hash to the digest recorded beside them, not the planted bytes. Where no
private directory is left, the command stops with one line instead.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "workloads" / "netbind" / "bindaddr.c"
NAME = f"libbindaddr-{hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]}.so"
OTHER_UID = 65534  # nobody
MARKER = "PLANTED LIBRARY RAN"
PLANTED_C = r"""
#include <unistd.h>
__attribute__((constructor)) static void planted(void)
{
    (void)write(2, "PLANTED LIBRARY RAN\n", 20);
}
"""
PROBE = """
import json, os, sys
from workloads import netbind
port = int(sys.argv[1])
binding = netbind.keep_workers_on_node("localhost", port, port)  # re-executes this program once
maps = set()
for line in open("/proc/self/maps"):
    fields = line.split(maxsplit=5)
    if len(fields) == 6 and ("bindaddr" in fields[5] or "planted" in fields[5]):
        maps.add(fields[5].strip())
print(json.dumps({"preload": os.environ["LD_PRELOAD"].split()[0], "maps": sorted(maps),
                  "binding": binding.as_record()}))
"""


@pytest.fixture(scope="module")
def planted_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real shared library that announces itself when loaded."""
    where = tmp_path_factory.mktemp("planted")
    source = where / "planted.c"
    source.write_text(PLANTED_C)
    library = where / "planted.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return library


@dataclass
class Layout:
    """The directories of one case: the cache, the per-user directories, somewhere else."""

    root: Path
    planted: bytes

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def private(self) -> Path:
        return self.cache / f"netbind-{os.geteuid()}"

    @property
    def home_private(self) -> Path:
        return self.home / ".cache" / "workloads" / f"netbind-{os.geteuid()}"

    def plant(self, directory: Path, digest: bytes | None = None, mode: int = 0o755) -> Path:
        """The planted library at `directory`/NAME, with a digest file beside it if given."""
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / NAME
        target.write_bytes(self.planted)
        target.chmod(mode)
        if digest is not None:
            (directory / f"{NAME}.sha256").write_bytes(digest)
        return target

    @property
    def planted_digest(self) -> bytes:
        return f"{hashlib.sha256(self.planted).hexdigest()}\n".encode()


def _private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)


# Each case: (what it plants, where the verified library must then be: "cache" or "home").
def _old_shared_path(lay: Layout) -> None:
    pass  # the old shared path is planted in every case


def _file_of_another_user(lay: Layout) -> None:
    _private_dir(lay.private)
    os.chown(lay.plant(lay.private, lay.planted_digest), OTHER_UID, OTHER_UID)


def _group_writable_file(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest, mode=0o775)


def _world_writable_file(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest, mode=0o757)


def _symlink_to_elsewhere(lay: Layout) -> None:
    _private_dir(lay.private)
    elsewhere = lay.plant(lay.root / "elsewhere", lay.planted_digest)
    (lay.private / NAME).symlink_to(elsewhere)
    (lay.private / f"{NAME}.sha256").write_bytes(lay.planted_digest)


def _other_content_stale_digest(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, f"{'0' * 64}\n".encode())


def _other_content_no_digest(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private)


def _digest_of_another_user(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest)
    os.chown(lay.private / f"{NAME}.sha256", OTHER_UID, OTHER_UID)


def _directory_of_another_user(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest)
    for path in (lay.private, *lay.private.iterdir()):
        os.chown(path, OTHER_UID, OTHER_UID)


def _directory_writable_by_all(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest)
    lay.private.chmod(0o777)


def _directory_is_a_symlink(lay: Layout) -> None:
    elsewhere = lay.root / "elsewhere-dir"
    _private_dir(elsewhere)
    lay.plant(elsewhere, lay.planted_digest)
    lay.cache.mkdir(parents=True, exist_ok=True)
    lay.private.symlink_to(elsewhere)


def _cache_writable_by_all(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest)
    lay.cache.chmod(0o777)


def _cache_of_another_user(lay: Layout) -> None:
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest)
    os.chown(lay.cache, OTHER_UID, OTHER_UID)


def _cache_sticky_and_shared(lay: Layout) -> None:
    lay.cache.mkdir(parents=True, exist_ok=True)
    lay.cache.chmod(0o1777)  # like /tmp: nobody can rename our directory away


CASES: dict[str, tuple[Callable[[Layout], None], str, bool]] = {
    # name: (plant, where the library must come from, needs root to plant)
    "old-shared-path": (_old_shared_path, "cache", False),
    "file-of-another-user": (_file_of_another_user, "cache", True),
    "group-writable-file": (_group_writable_file, "cache", False),
    "world-writable-file": (_world_writable_file, "cache", False),
    "symlink-to-elsewhere": (_symlink_to_elsewhere, "cache", False),
    "other-content-stale-digest": (_other_content_stale_digest, "cache", False),
    "other-content-no-digest": (_other_content_no_digest, "cache", False),
    "digest-of-another-user": (_digest_of_another_user, "cache", True),
    "directory-of-another-user": (_directory_of_another_user, "home", True),
    "directory-writable-by-all": (_directory_writable_by_all, "home", False),
    "directory-is-a-symlink": (_directory_is_a_symlink, "home", False),
    "cache-writable-by-all": (_cache_writable_by_all, "home", False),
    "cache-of-another-user": (_cache_of_another_user, "home", True),
    "cache-sticky-and-shared": (_cache_sticky_and_shared, "cache", False),
}


def _env(lay: Layout) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM", "WORKLOADS_", "LD_PRELOAD")) and k != "CC"}
    env.update({"PYTHONPATH": str(REPO), "WORKLOADS_CACHE": str(lay.cache),
                "HOME": str(lay.home)})
    return env


def _layout(tmp_path: Path, planted_library: Path) -> Layout:
    lay = Layout(tmp_path, planted_library.read_bytes())
    lay.home.mkdir(mode=0o700)
    lay.plant(lay.cache / "netbind", lay.planted_digest, mode=0o777)  # the old shared path
    lay.cache.chmod(0o755)  # whatever the umask; the cases change what they test
    return lay


def assert_verified(preload: Path, lay: Layout) -> None:
    """The checks a trusted library passes, made again from outside the worker."""
    directory = os.lstat(preload.parent)
    assert stat.S_ISDIR(directory.st_mode) and directory.st_uid == os.geteuid()
    assert stat.S_IMODE(directory.st_mode) == 0o700
    info = os.lstat(preload)
    assert stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()
    assert not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    data = preload.read_bytes()
    assert data != lay.planted
    recorded = (preload.parent / f"{preload.name}.sha256").read_text().strip()
    assert recorded == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("case", list(CASES))
def test_a_planted_library_is_never_preloaded(case: str, tmp_path: Path,
                                              planted_library: Path) -> None:
    plant, expected, needs_root = CASES[case]
    if needs_root and os.geteuid() != 0:
        pytest.skip("planting a file of another user needs root")
    lay = _layout(tmp_path, planted_library)
    plant(lay)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run([sys.executable, "-c", PROBE, str(port)], env=_env(lay), cwd=REPO,
                          capture_output=True, text=True, timeout=120, check=False)
    assert MARKER not in done.stderr + done.stdout, f"{case}: the planted library ran"
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    preload = Path(found["preload"])
    assert found["maps"] == [str(preload)], found
    assert preload.parent == (lay.private if expected == "cache" else lay.home_private)
    assert_verified(preload, lay)
    assert found["binding"]["address"] == "127.0.0.1"


def test_without_a_private_directory_the_run_stops_in_one_line(
        tmp_path: Path, planted_library: Path) -> None:
    """Cache and home both writable by anyone: one line, exit 2, nothing loaded or written."""
    lay = _layout(tmp_path, planted_library)
    _private_dir(lay.private)
    lay.plant(lay.private, lay.planted_digest)
    lay.cache.chmod(0o777)
    shutil.rmtree(lay.home)
    shared_home = tmp_path / "shared"
    shared_home.mkdir()
    shared_home.chmod(0o777)
    env = {**_env(lay), "HOME": str(shared_home / "me"), "SLURM_PROCID": "0",
           "SLURM_STEP_NUM_TASKS": "2", "SLURMD_NODENAME": "localhost"}
    out = tmp_path / "r.json"
    done = subprocess.run([sys.executable, "-m", "workloads", "cifar10", "--distributed", "slurm",
                           "--data", "synthetic", "--output", str(out)],
                          env=env, cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)
    assert MARKER not in done.stderr + done.stdout
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "no private directory for the worker bind library" in lines[0]
    assert "/cache is writable by all (mode 777, not sticky)" in lines[0], lines[0]
    assert "set WORKLOADS_CACHE to a directory only you can write" in lines[0]
    assert not out.exists()
