"""The fingerprint filter agrees with gpg on real keys and refuses what is not a key."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleFilterError

from tests.ansible.playbook import ANSIBLE_DIR


def _load_filter() -> Callable[[Any], list[str]]:
    spec = importlib.util.spec_from_file_location(
        "openpgp_filter", ANSIBLE_DIR / "filter_plugins" / "openpgp.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Callable[[Any], list[str]] = module.FilterModule().filters()["openpgp_fingerprints"]
    return found


openpgp_fingerprints = _load_filter()


def _gpg_key(home: Path, algorithm: str) -> tuple[str, str]:
    """A fresh key of `algorithm`: (armored public key, fingerprint according to gpg)."""
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        subprocess.run([*gpg, "--quick-generate-key", f"{algorithm} <t@example.invalid>",
                        algorithm, "sign", "never"], env=env, check=True, capture_output=True)
        armored = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True,
                                 capture_output=True, text=True).stdout
        colons = subprocess.run([*gpg, "--with-colons", "--list-keys"], env=env, check=True,
                                capture_output=True, text=True).stdout
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)
    fingerprint = next(line.split(":")[9] for line in colons.splitlines()
                       if line.startswith("fpr:"))
    return armored, fingerprint


@pytest.mark.parametrize("algorithm", ["ed25519", "rsa2048"])
def test_fingerprint_matches_gpg(tmp_path: Path, algorithm: str) -> None:
    armored, fingerprint = _gpg_key(tmp_path / "gnupg", algorithm)
    assert openpgp_fingerprints(armored) == [fingerprint]


def test_armor_headers_are_ignored(tmp_path: Path) -> None:
    armored, fingerprint = _gpg_key(tmp_path / "gnupg", "ed25519")
    with_header = armored.replace(
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n",
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\nComment: mirrored by example.invalid\n", 1)
    assert "Comment:" in with_header
    assert openpgp_fingerprints(with_header) == [fingerprint]


@pytest.mark.parametrize("text", ["", "<html>404 Not Found</html>",
                                  "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n"
                                  "-----END PGP PUBLIC KEY BLOCK-----\n"])
def test_non_keys_are_refused(text: str) -> None:
    with pytest.raises(AnsibleFilterError):
        openpgp_fingerprints(text)


def test_two_key_block_lists_both_primary_keys_and_no_subkey(tmp_path: Path) -> None:
    """repo_trust refuses a block unless its only primary key is the pinned one: it sees all."""
    home = tmp_path / "gnupg"
    first, first_fingerprint = _gpg_key(home, "ed25519")
    env = {**os.environ, "GNUPGHOME": str(home)}
    gpg = ["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", ""]
    try:
        # A subkey of the first key (as vendors' keys have) is not a key of its own.
        subprocess.run([*gpg, "--quick-add-key", first_fingerprint, "cv25519", "encr", "never"],
                       env=env, check=True, capture_output=True)
        second_home = tmp_path / "second"
        second, second_fingerprint = _gpg_key(second_home, "ed25519")
        subprocess.run([*gpg, "--import"], input=second, env=env, check=True, capture_output=True,
                       text=True)
        block = subprocess.run([*gpg, "--armor", "--export"], env=env, check=True,
                               capture_output=True, text=True).stdout
    finally:
        subprocess.run(["gpgconf", "--kill", "all"], env=env, check=False, capture_output=True)
    assert block.count("BEGIN PGP PUBLIC KEY BLOCK") == 1
    assert first != block
    assert openpgp_fingerprints(block) == [first_fingerprint, second_fingerprint]
