"""The bind shim's trust decisions over every combination of the states a file system offers.

``is_verified`` (the library file and its recorded digest) and
``private_directory_problem`` (its directory and the directories above) are
checked on real files for the product of kind, owner, mode and digest states;
the expected answer is written out independently of the code's own rules.
tests/workloads/test_netbind_planted.py runs the whole path with a worker.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
from pathlib import Path

import pytest

from workloads.netbind import library

OTHER_UID = 65534
ME = os.geteuid()
OWNERS = [ME, OTHER_UID] if ME == 0 else [ME]  # planting files of others needs root
FILE_MODES = [0o600, 0o644, 0o755, 0o664, 0o646, 0o775, 0o757, 0o666, 0o777]
FILE_KINDS = ["file", "symlink", "fifo", "directory"]
DIGESTS = ["matching", "stale", "missing", "symlink", "other-owner", "writable"]
DIR_KINDS = ["directory", "symlink"]
DIR_MODES = [0o700, 0o711, 0o750, 0o755, 0o770, 0o777, 0o1777]
PARENT_MODES = [0o700, 0o755, 0o775, 0o777, 0o1777, 0o1775]
BYTES = b"\x7fELF not really, but bytes with a digest"


def _digest(data: bytes) -> bytes:
    return f"{hashlib.sha256(data).hexdigest()}\n".encode()


def _make_library(where: Path, kind: str, owner: int, mode: int, digest: str) -> Path:
    where.mkdir()
    target = where / "libbindaddr-0123456789abcdef.so"
    if kind == "file":
        target.write_bytes(BYTES)
    elif kind == "symlink":
        real = where / "real.so"
        real.write_bytes(BYTES)
        real.chmod(mode)
        os.chown(real, owner, owner)
        target.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(target)
    else:
        target.mkdir()
    if kind != "symlink":
        target.chmod(mode)
        os.chown(target, owner, owner)
    record = where / (target.name + library.DIGEST_SUFFIX)
    if digest == "symlink":
        real_digest = where / "real.sha256"
        real_digest.write_bytes(_digest(BYTES))
        record.symlink_to(real_digest)
    elif digest != "missing":
        record.write_bytes(_digest(b"other bytes") if digest == "stale" else _digest(BYTES))
        record.chmod(0o646 if digest == "writable" else 0o644)
        if digest == "other-owner" and ME == 0:
            os.chown(record, OTHER_UID, OTHER_UID)
    return target


def test_only_a_regular_private_file_matching_its_digest_is_verified(tmp_path: Path) -> None:
    digests = DIGESTS if ME == 0 else [d for d in DIGESTS if d != "other-owner"]
    cases = list(itertools.product(FILE_KINDS, OWNERS, FILE_MODES, digests))
    wrong = []
    for number, (kind, owner, mode, digest) in enumerate(cases):
        target = _make_library(tmp_path / str(number), kind, owner, mode, digest)
        expected = (kind == "file" and owner == ME and not mode & 0o022
                    and digest == "matching")
        if library.is_verified(target) != expected:
            wrong.append((kind, owner, oct(mode), digest))
    assert not wrong, f"{len(wrong)} of {len(cases)} states decided wrongly: {wrong[:10]}"


def _make_directory(where: Path, kind: str, owner: int, mode: int, parent_owner: int,
                    parent_mode: int) -> Path:
    parent = where / "cache"
    parent.mkdir(parents=True)
    where.chmod(0o755)  # whatever the umask: only `parent` and below vary
    directory = parent / f"netbind-{ME}"
    if kind == "directory":
        directory.mkdir()
    else:
        real = where / "elsewhere"
        real.mkdir()
        real.chmod(0o700)
        directory.symlink_to(real)
    if kind == "directory":
        directory.chmod(mode)
        os.chown(directory, owner, owner)
    parent.chmod(parent_mode)
    os.chown(parent, parent_owner, parent_owner)
    return directory


def _parent_is_safe(owner: int, mode: int) -> bool:
    return owner in (0, ME) and (not mode & 0o022 or bool(mode & stat.S_ISVTX))


def test_only_a_private_directory_under_safe_parents_is_used(tmp_path: Path) -> None:
    cases = list(itertools.product(DIR_KINDS, OWNERS, DIR_MODES, OWNERS, PARENT_MODES))
    wrong = []
    for number, (kind, owner, mode, parent_owner, parent_mode) in enumerate(cases):
        directory = _make_directory(tmp_path / str(number), kind, owner, mode, parent_owner,
                                    parent_mode)
        expected = (kind == "directory" and owner == ME and not mode & 0o077
                    and _parent_is_safe(parent_owner, parent_mode))
        problem = library.private_directory_problem(directory)
        if (problem is None) != expected or (problem is not None and "\n" in problem):
            wrong.append((kind, owner, oct(mode), parent_owner, oct(parent_mode), problem))
    assert not wrong, f"{len(wrong)} of {len(cases)} states decided wrongly: {wrong[:10]}"


def test_a_fresh_build_records_the_digest_of_its_bytes(netbind_cache: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(library.SHIM_ENV, raising=False)
    built = library.shim_library()
    assert built == netbind_cache / f"netbind-{ME}" / library.library_name()
    recorded = built.with_name(built.name + library.DIGEST_SUFFIX).read_text().strip()
    assert recorded == hashlib.sha256(built.read_bytes()).hexdigest()
    assert sorted(p.name for p in built.parent.iterdir()) == sorted(
        [built.name, built.name + library.DIGEST_SUFFIX]), "no temporary file is left"
    assert library.is_verified(built)


@pytest.mark.parametrize(("owner", "mode", "accepted"), [
    (ME, 0o755, True), (ME, 0o775, False), (ME, 0o757, False), (OTHER_UID, 0o755, False),
])
def test_a_given_library_must_be_yours_and_writable_by_nobody_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: int, mode: int,
        accepted: bool) -> None:
    if owner != ME and ME != 0:
        pytest.skip("a file of another user needs root")
    given = tmp_path / "libbindaddr.so"
    given.write_bytes(BYTES)
    given.chmod(mode)
    os.chown(given, owner, owner)
    monkeypatch.setenv(library.SHIM_ENV, str(given))
    if accepted:
        assert library.shim_library() == given
    else:
        with pytest.raises(library.WorkloadError, match="owned by someone else or writable"):
            library.shim_library()
