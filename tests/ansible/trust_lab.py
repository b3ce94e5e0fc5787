"""A small lab for the trust tests: the stub repositories plus the hostile variants they need.

Why its own lab and not tests/ansible/conftest.py's scenarios: those converge
three hosts (minutes); these tests each need one fresh host and one or two
short runs of a single role. What they add to the stub repositories, all
served on 127.0.0.1 by the same HTTP server:

* ``two-keys/3bf863cc.pub``: ONE armored block holding the CUDA repository's
  real (pinned) key and a second key, as a mirror or CDN that slipped in its
  own key would serve it;
* ``appended/3bf863cc.pub``: the vendor's file unchanged, with the second key's
  own armored block appended after it;
* ``evil/compute/cuda/repos/...``: a copy of the CUDA repository whose Release
  the second key signed; apt must never accept it;
* a second server whose CUDA repository can be switched off (HTTP 404), to
  interrupt a first run between writing the sources file and reading the
  index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.ansible.fake_registry import fake_registry
from tests.ansible.lab import Lab
from tests.ansible.playbook import EXAMPLE_NGC_API_KEY, PlaybookRun, run_playbook, write_inventory
from tests.ansible.target import TargetHost, start_target, target_image
from tests.fixtures.aptrepo import StubRepos, build_stub_repos, serve_directory
from tests.fixtures.aptrepo.signing import generate_key

CUDA_DIR = Path("compute/cuda/repos/debian12/x86_64")
TWO_KEYS = Path("two-keys/3bf863cc.pub")
APPENDED = Path("appended/3bf863cc.pub")
EVIL = Path("evil")


@dataclass
class TrustLab:
    """The shared Lab plus the hostile variants and a switchable mirror."""

    lab: Lab
    repos: StubRepos
    base_url: str
    flaky_root: Path
    flaky_url: str
    http_log: Path
    extra_fingerprint: str

    def start(self, name: str) -> tuple[TargetHost, Path]:
        """A fresh target container and its inventory."""
        host = start_target(self.lab.target_image, name)
        return host, write_inventory(self.lab.path(f"{name}.inventory.yml"), host.name)

    def run(self, inventory: Path, log_name: str, extra: dict[str, Any] | None = None,
            *options: str) -> PlaybookRun:
        """site.yml with the lab's variables, `extra` on top."""
        files = [self.lab.vars_file]
        if extra:
            files.append(self.lab.extra_vars_file(f"{log_name}.yml", extra))
        return run_playbook(inventory, files, self.lab.path(f"{log_name}.log"), *options)

    def cuda_repo_online(self, online: bool) -> None:
        """Serve (or stop serving, HTTP 404) the CUDA repository on the flaky server."""
        link = self.flaky_root / "compute"
        if online and not link.exists():
            link.symlink_to(self.repos.root / "compute", target_is_directory=True)
        elif not online and link.is_symlink():
            link.unlink()


def _two_key_variants(repos: StubRepos, keys: Path) -> str:
    """Write the two-key block and the repository the extra key signed; returns its fingerprint."""
    extra = generate_key(keys / "mirror", "mirror's own key <mirror@example.invalid>")
    try:
        env = {**os.environ, "GNUPGHOME": str(extra.home)}
        pinned = (repos.root / CUDA_DIR / "3bf863cc.pub").read_bytes()
        subprocess.run(["gpg", "--batch", "--import"], input=pinned, env=env, check=True,
                       capture_output=True)
        block = subprocess.run(
            ["gpg", "--batch", "--armor", "--export", repos.cuda_fingerprint, extra.fingerprint],
            env=env, check=True, capture_output=True, text=True).stdout
        (repos.root / TWO_KEYS).parent.mkdir(parents=True, exist_ok=True)
        (repos.root / TWO_KEYS).write_text(block)
        (repos.root / APPENDED).parent.mkdir(parents=True, exist_ok=True)
        (repos.root / APPENDED).write_text(pinned.decode() + extra.public_armored)
        evil = repos.root / EVIL / CUDA_DIR
        shutil.copytree(repos.root / CUDA_DIR, evil)
        for name in ("InRelease", "Release.gpg"):
            (evil / name).unlink()
        extra.sign_release(evil / "Release")
    finally:
        extra.close()
    return extra.fingerprint


@contextmanager
def trust_lab(workdir: Path) -> Iterator[TrustLab]:
    """Build the repositories and variants, serve them, and yield the lab."""
    repos = build_stub_repos(workdir / "repos")
    with tempfile.TemporaryDirectory(prefix="trust-gpg-") as keys:
        extra_fingerprint = _two_key_variants(repos, Path(keys))
    flaky_root = workdir / "flaky"
    flaky_root.mkdir()
    image = target_image()
    http_log = workdir / "repo-http.log"
    with ExitStack() as stack:
        base_url = stack.enter_context(serve_directory(repos.root, http_log))
        flaky_url = stack.enter_context(serve_directory(flaky_root, workdir / "flaky-http.log"))
        registry = stack.enter_context(fake_registry("$oauthtoken", EXAMPLE_NGC_API_KEY))
        lab = Lab(workdir, repos, base_url, registry.address, image)
        yield TrustLab(lab, repos, base_url, flaky_root, flaky_url, http_log, extra_fingerprint)
