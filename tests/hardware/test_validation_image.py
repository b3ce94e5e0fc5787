"""gpu_validate finds, pulls or builds its image: an unqualified name is built, never pulled.

The role's image tasks (tasks/image.yml) run for real on this machine
(connection local) against the private Docker engine: the build context is
copied from the repository exactly as on a GPU host, and built from a
Dockerfile that differs from images/ngc/Dockerfile only in its (local) base,
since NGC is unreachable here.

The context's way there is private: on the controller it is packed in a directory
of a random name and mode 0700 (watched while the play runs), removed afterwards,
also when the play fails; on the host it replaces the build directory whole, so a
file planted there (or deleted from the repository) never reaches the image.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.ansible.playbook import REPO, PlaybookRun
from tests.ansible.target import docker, target_image
from tests.hardware.localplay import run_role_tasks

pytestmark = [pytest.mark.docker]

def _run(tmp_path: Path, name: str, variables: dict[str, object],
         controller_tmp: Path | None = None) -> PlaybookRun:
    """The role's image tasks; with `controller_tmp`, the play's TMPDIR (its alone)."""
    env = {"TMPDIR": str(controller_tmp)} if controller_tmp is not None else None
    return run_role_tasks(tmp_path, name, "gpu_validate", "image", variables, env=env)


def _look(directory: Path, seen: dict[str, int],
          walk: Callable[[Path], Iterator[tuple[str, list[str], list[str]]]] = os.walk) -> None:
    """Add every path under `directory` to `seen` with its mode, once. Paths come and go
    while it looks (Ansible's payloads): os.walk passes over a directory removed between
    its listing and its reading, where pathlib's rglob raises and ended the watch."""
    for root, dirs, files in walk(directory):
        for name in (*dirs, *files):
            path = Path(root, name)
            try:
                seen.setdefault(str(path.relative_to(directory)), path.lstat().st_mode)
            except FileNotFoundError:
                continue


@contextmanager
def _watched(directory: Path) -> Iterator[dict[str, int]]:
    """Every path that appears under `directory` while the block runs, with its mode
    (st_mode), sampled every few milliseconds: what another account on the controller
    could have found there."""
    seen: dict[str, int] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            _look(directory, seen)
            done.wait(0.005)

    watcher = threading.Thread(target=watch, name="tmpdir-watch", daemon=True)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join(timeout=10)


def test_the_watch_passes_over_a_directory_removed_while_it_looks(tmp_path: Path) -> None:
    """A directory listed, then gone before it is read (os.walk's scandir of it fails), is
    passed over and the rest is still seen: the watch must outlast the payloads it watches."""
    for name in ("gone/payload", "kept/context.tar.gz"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")

    def vanishing(top: Path) -> Iterator[tuple[str, list[str], list[str]]]:
        """os.walk, with `gone` removed once the top's listing (which names it) is seen."""
        walk = os.walk(top)
        yield next(walk)
        shutil.rmtree(tmp_path / "gone")
        yield from walk

    seen: dict[str, int] = {}
    _look(tmp_path, seen, walk=vanishing)
    assert sorted(seen) == ["gone", "kept", "kept/context.tar.gz"]
    assert not (tmp_path / "gone").exists()


def test_an_unqualified_image_is_built_on_the_host_not_pulled(
        docker_host: str, tmp_path: Path) -> None:
    image = f"tfhost/hw-validate:{os.getpid()}"
    base = target_image()
    controller_tmp = tmp_path / "controller-tmp"
    controller_tmp.mkdir(mode=0o1777)
    controller_tmp.chmod(0o1777)  # like /tmp: every account on the controller can look in
    # What the host's build directory holds from before: a file no longer in the
    # repository, and one planted inside a directory the image copies.
    context = tmp_path / "context"
    (context / "workloads").mkdir(parents=True)
    (context / "workloads" / "planted.py").write_text("raise SystemExit('planted')\n")
    (context / "removed-from-the-repository.txt").write_text("stale\n")
    (context / ".tfhost-build-context").write_text("from an earlier build\n")
    with _watched(controller_tmp) as seen:
        run = _run(tmp_path, "build", {
            "gpu_validate_image": image,
            "gpu_validate_pull": "missing",
            "gpu_validate_build_source": str(REPO),
            "gpu_validate_build_dockerfile": "tests/hardware/fixtures/validate.Dockerfile",
            "gpu_validate_build_args": {"BASE_IMAGE": base},
            "gpu_validate_build_dir": str(context),
            "gpu_validate_build_timeout": 600,
        }, controller_tmp)
    try:
        assert run.returncode == 0, run.explain()
        assert "TASK [gpu_validate : Pull the validation image]" in run.output
        assert "skipping: [localhost]" in run.output.split("Pull the validation image]")[1][:400]
        listed = docker("run", "--rm", image).stdout.strip()
        assert listed == "/opt/src/workloads/cli.py"
        assert (context / "workloads" / "cli.py").is_file()
        # The host's directory was replaced whole: nothing from before reached the image.
        assert not (context / "workloads" / "planted.py").exists()
        assert not (context / "removed-from-the-repository.txt").exists()
        planted = docker("run", "--rm", image, "/opt/src/workloads/planted.py", check=False)
        assert planted.returncode != 0 and "No such file" in planted.stderr, planted
        assert stat.S_IMODE(context.stat().st_mode) == 0o700
    finally:
        docker("image", "rm", "--force", image, check=False)
    # The controller side: one directory of a random name, 0700, with the archive inside;
    # nothing at a name another account could predict, and nothing left behind.
    # (Ansible's own module payloads and job files land there too, all private as well.)
    tops = {name: mode for name, mode in seen.items() if "/" not in name}
    loose = {name: oct(mode) for name, mode in tops.items() if stat.S_IMODE(mode) & 0o077}
    assert loose == {}
    ours = [name for name in tops if name.startswith("tfhost-")]
    assert len(ours) == 1, sorted(tops)
    assert stat.S_ISDIR(tops[ours[0]]) and stat.S_IMODE(tops[ours[0]]) == 0o700
    assert ours[0].startswith("tfhost-build-context-")
    assert ours[0] != "tfhost-build-context-localhost.tar.gz"
    assert f"{ours[0]}/context.tar.gz" in seen, seen
    assert list(controller_tmp.iterdir()) == []


def test_the_controller_context_is_removed_when_the_build_fails(
        docker_host: str, tmp_path: Path) -> None:
    controller_tmp = tmp_path / "controller-tmp"
    controller_tmp.mkdir()
    run = _run(tmp_path, "broken", {
        "gpu_validate_image": f"tfhost/hw-validate-broken:{os.getpid()}",
        "gpu_validate_pull": "never",
        "gpu_validate_build_source": str(REPO),
        "gpu_validate_build_dockerfile": "tests/hardware/fixtures/absent.Dockerfile",
        "gpu_validate_build_dir": str(tmp_path / "context"),
    }, controller_tmp)
    assert run.returncode != 0
    assert "Remove the controller's private build-context directory" in run.output
    assert list(controller_tmp.iterdir()) == []


def test_a_build_directory_the_role_did_not_fill_is_not_replaced(
        docker_host: str, tmp_path: Path) -> None:
    """The role replaces gpu_validate_build_dir whole, so it refuses one pointed at, say,
    /opt by mistake: one line, and every file still there."""
    elsewhere = tmp_path / "opt"
    (elsewhere / "vendor").mkdir(parents=True)
    (elsewhere / "vendor" / "tool").write_text("keep me\n")
    run = _run(tmp_path, "elsewhere", {
        "gpu_validate_image": f"tfhost/hw-validate-elsewhere:{os.getpid()}",
        "gpu_validate_pull": "never",
        "gpu_validate_build_source": str(REPO),
        "gpu_validate_build_dockerfile": "tests/hardware/fixtures/validate.Dockerfile",
        "gpu_validate_build_dir": str(elsewhere),
    })
    assert run.returncode != 0
    assert run.failed_task == (
        "gpu_validate : Refuse to replace a build directory the role did not fill")
    said = " ".join(run.output.split())
    assert (f"gpu_validate_build_dir {elsewhere} on localhost holds files the role did not put "
            "there, and the role replaces that directory whole at each build. Fix:") in said
    assert (elsewhere / "vendor" / "tool").read_text() == "keep me\n"


def test_a_registry_image_that_cannot_be_had_fails_with_the_fix(docker_host: str,
                                                                tmp_path: Path) -> None:
    image = "127.0.0.1:1/tfhost/absent:1"  # a registry nobody listens on (loopback)
    run = _run(tmp_path, "absent", {"gpu_validate_image": image, "gpu_validate_pull": "missing",
                                    "gpu_validate_build": "never"})
    assert run.returncode != 0
    assert run.failed_task == "gpu_validate : Fail if the image is not available"
    said = " ".join(run.output.split())
    assert f"The validation image {image} is not on localhost: the pull failed" in said
    assert "Fix: set gpu_validate_build: missing" in said
