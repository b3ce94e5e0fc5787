"""debootstrap in build-base-image.sh and build-box.sh checks the mirror's signature.

Without ``--keyring`` debootstrap only warns when it cannot check the Release
file and goes on with whatever the mirror served. Both scripts therefore hand
it Debian's archive keyring explicitly and refuse, in one line, when the
keyring is missing. A fake ``debootstrap`` first in PATH records what the
scripts pass; the real one, given a keyring that did not sign Debian's
Release file, must stop the build before anything is unpacked.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support.docker_engine import engine_client

REPO = Path(__file__).resolve().parents[2]
BASE_IMAGE = REPO / "scripts" / "build-base-image.sh"
BUILD_BOX = REPO / "scripts" / "build-box.sh"
DEBIAN_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the scripts need root")


def _fake_tools(folder: Path) -> Path:
    """A PATH folder whose debootstrap records its arguments and fails, and whose docker
    answers ``version`` (so build-base-image.sh gets as far as debootstrap)."""
    folder.mkdir()
    (folder / "debootstrap").write_text(f'#!/bin/sh\necho "$@" >{folder}/args\nexit 1\n')
    (folder / "docker").write_text("#!/bin/sh\n[ \"$1\" = version ] && exit 0\nexit 1\n")
    for tool in ("debootstrap", "docker"):
        (folder / tool).chmod(0o755)
    return folder


def _run(script: Path, args: list[str], path_first: Path | None = None,
         **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, **env}
    if path_first is not None:
        environ["PATH"] = f"{path_first}:{environ['PATH']}"
    return subprocess.run([str(script), *args], capture_output=True, text=True, check=False,
                          env=environ, timeout=600)


@pytest.mark.parametrize(("script", "args"), [
    (BASE_IMAGE, ["tfhost/keyring-test"]),
    (BUILD_BOX, []),
])
def test_debootstrap_gets_debians_keyring(script: Path, args: list[str], tmp_path: Path) -> None:
    if not DEBIAN_KEYRING.is_file():
        pytest.skip("debian-archive-keyring is not installed")
    fake = _fake_tools(tmp_path / "bin")
    result = _run(script, [*args, "--mirror", "http://127.0.0.1:9/debian"]
                  + (["--cache", str(tmp_path / "cache")] if script == BUILD_BOX else []),
                  path_first=fake)
    assert result.returncode != 0  # the fake debootstrap fails
    assert f"--keyring={DEBIAN_KEYRING}" in (fake / "args").read_text().split()


@pytest.mark.parametrize(("script", "args"), [
    (BASE_IMAGE, ["tfhost/keyring-test"]),
    (BUILD_BOX, []),
])
def test_missing_keyring_is_one_line(script: Path, args: list[str], tmp_path: Path) -> None:
    fake = _fake_tools(tmp_path / "bin")
    missing = tmp_path / "no-such-keyring.gpg"
    result = _run(script, [*args, "--keyring", str(missing)]
                  + (["--cache", str(tmp_path / "cache")] if script == BUILD_BOX else []),
                  path_first=fake)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"Debian archive keyring {missing} not found" in result.stderr
    assert "apt-get install -y debian-archive-keyring" in result.stderr
    assert not (fake / "args").exists()  # refused before debootstrap ran


@pytest.mark.docker
def test_release_signed_by_another_key_is_refused(docker_host: str, tmp_path: Path) -> None:
    """The real debootstrap against the tests' Debian mirror, with a throwaway key's keyring."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--homedir", str(home), "--batch", "--quiet"]
    subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", "tfhost test <t@invalid>",
                    "ed25519", "sign", "never"], check=True, capture_output=True)
    keyring = tmp_path / "other.gpg"
    keyring.write_bytes(subprocess.run([*gpg, "--export"], check=True,
                                       capture_output=True).stdout)
    result = _run(BASE_IMAGE, ["tfhost/keyring-test", "--keyring", str(keyring)])
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert f"is not signed by a key in {keyring}" in result.stderr

    assert not engine_client().images.list(name="tfhost/keyring-test")
