"""scripts/build-box.sh: a vagrant-libvirt box built offline from Debian's mirror."""

from __future__ import annotations

import json
import stat
import subprocess
import tarfile

import pytest

from tests.vm.machine import BUILD_BOX, Box, build_box

pytestmark = pytest.mark.slow


def test_box_is_a_vagrant_libvirt_box(box: Box) -> None:
    with tarfile.open(box.vagrant_box) as archive:
        names = set(archive.getnames())
        metadata = json.load(archive.extractfile("metadata.json"))  # type: ignore[arg-type]
        vagrantfile = archive.extractfile("Vagrantfile").read().decode()  # type: ignore[union-attr]
        image_size = archive.getmember("box.img").size
    assert names == {"metadata.json", "Vagrantfile", "vagrant_key", "box.img"}
    assert metadata == {"provider": "libvirt", "format": "qcow2", "virtual_size": 12}
    assert 'File.expand_path("vagrant_key", __dir__)' in vagrantfile
    assert image_size == box.disk.stat().st_size

    info = json.loads(subprocess.run(["qemu-img", "info", "--output=json", str(box.disk)],
                                     capture_output=True, text=True, check=True).stdout)
    assert info["format"] == "qcow2"
    assert info["virtual-size"] == 12 * 1024**3
    assert "backing-filename" not in info, "the box must stand alone"


def test_manifest_names_the_kernel_and_recipe(box: Box) -> None:
    manifest = box.manifest
    assert manifest["recipe"] == box.path.name
    assert str(manifest["kernel"]).endswith("-cloud-amd64")
    assert manifest["suite"] == "bookworm"
    for package in ("openssh-server", "python3", "sudo", "grub-pc", "pciutils"):
        assert package in str(manifest["packages"]).split(",")


def test_private_key_and_box_are_readable_by_root_only(box: Box) -> None:
    for path in (box.key, box.vagrant_box):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_second_build_reuses_the_cached_box(box: Box) -> None:
    again = build_box()
    assert again.path == box.path
    assert again.manifest["built_at"] == box.manifest["built_at"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "2G"], "--size 2G is too small"),
        (["--size", "twelve"], "--size must be whole GiB"),
        (["--colour", "blue"], "unknown option --colour"),
    ],
)
def test_bad_options_fail_with_one_clear_line(args: list[str], message: str) -> None:
    result = subprocess.run([str(BUILD_BOX), *args], capture_output=True, text=True, check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith("build-box: ") and message in lines[0], lines
