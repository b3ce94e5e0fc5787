"""build-base-image.sh builds each recipe once when two callers ask for it at the same time.

Why: the suite's background jobs (tests/support/background.py) and the
foreground tests both ask for the Debian stand-in image in the first minutes of
a session; on a fresh machine neither finds it. Without the lock both run
debootstrap (minutes each, on CI's two cores) and import the same image twice.
Fakes first in PATH stand in for debootstrap (slow, counts its runs) and for
docker (an image store in a file), so the script's own locking is what runs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = REPO / "scripts" / "build-base-image.sh"

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the script needs root")

FAKE_DEBOOTSTRAP = """#!/bin/bash
echo run >>{folder}/debootstrap-runs
sleep 2
target=${{@: -2:1}}
mkdir -p "$target/etc/apt" "$target/var/cache/apt/archives" "$target/var/lib/apt/lists"
"""

FAKE_DOCKER = """#!/bin/bash
images={folder}/images
case $1 in
  version) exit 0 ;;
  image) [[ $2 == inspect ]] && grep -qxF "$3" "$images" 2>/dev/null; exit $? ;;
  import) cat >/dev/null; echo "$3" >>"$images"; exit 0 ;;
  tag) exit 0 ;;
esac
exit 1
"""


def _fakes(folder: Path) -> Path:
    folder.mkdir()
    for name, text in (("debootstrap", FAKE_DEBOOTSTRAP), ("docker", FAKE_DOCKER)):
        (folder / name).write_text(text.format(folder=folder))
        (folder / name).chmod(0o755)
    return folder


def test_two_concurrent_builds_of_one_recipe_run_debootstrap_once(tmp_path: Path) -> None:
    fakes = _fakes(tmp_path / "bin")
    keyring = tmp_path / "keyring.gpg"
    keyring.write_bytes(b"any non-empty keyring: the fake debootstrap does not read it")
    tag = f"tfhost/lock-test-{tmp_path.name}"
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}"}
    command = [str(BASE_IMAGE), tag, "--keyring", str(keyring), "--include", "python3"]
    callers = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(2)]
    try:
        outputs = [caller.communicate(timeout=120) for caller in callers]
    finally:
        for lock in Path("/run/lock").glob(f"tfhost-base-image.tfhost_lock-test-{tmp_path.name}*"):
            lock.unlink()
    assert [caller.returncode for caller in callers] == [0, 0], outputs
    tags = {stdout.strip().splitlines()[-1] for stdout, _ in outputs}
    assert len(tags) == 1 and tags.pop().startswith(f"{tag}:"), outputs
    assert (fakes / "debootstrap-runs").read_text().count("run") == 1
    assert (fakes / "images").read_text().count("\n") == 1
