"""A driver installed another way, found before anything changes (Ubuntu 24.04 stand-in).

One container, the driver role only (`--tags nvidia_driver`), and the CUDA toolkit's:

1. NVIDIA's .run installer's marks on a fresh host, as nvidia-installer leaves them
   (tests/fixtures/runfile.py): its record /var/lib/nvidia/log, nvidia-uninstall linked
   to nvidia-installer, and its log. `--check` stops at once with one line naming them
   and the fix, and the host is as before; so it does for a driver installed with
   `--utility-prefix=/opt/nvidia` (nothing in /usr/bin: the record names the
   uninstaller), and `--tags cuda_toolkit --check` for a CUDA toolkit installed by its
   runfile (/usr/local/cuda-12.8/bin/cuda-uninstaller).
2. The marks gone, Ubuntu's own driver of another branch, as `ubuntu-drivers install`
   leaves it: nvidia-driver-535-server and its dependencies and Canonical's prebuilt
   modules for the running kernel (linux-modules-nvidia-535-server-generic, -<kernel>,
   linux-objects-nvidia-535-server-<kernel>, linux-signatures-nvidia-<kernel>), from
   a signed stand-in of Ubuntu's archive on 127.0.0.1 (tests/fixtures/aptrepo/
   ubuntu_archive.py), held. The archive also has its own build of branch 580, a newer
   point release than NVIDIA's repository (580.159.03 beside 580.126.16), under the
   names NVIDIA's packages have. The play names every package of 535 before its first
   change, installs branch 580 from NVIDIA's repository (the stub of
   tests/fixtures/aptrepo), not the archive's newer build, removes all of 535 and holds
   580; a second run changes nothing.
3. The marks again, on that converged host, without --check: refused, nothing changed.

Before the fix the .run driver was not looked for, and the branch change left
Canonical's per-kernel modules of 535 (and their signatures) installed beside 570's
DKMS module: the version-only test (535.*) did not see packages that carry the
kernel's version.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.lab import CHECK_MODE_WITNESSES, Lab
from tests.ansible.platforms import UBUNTU2404
from tests.ansible.playbook import PlaybookRun, run_playbook, write_inventory
from tests.ansible.target import TargetHost, start_target, target_image
from tests.ansible.timings import record_timing
from tests.fixtures import runfile
from tests.fixtures.aptrepo import build_stub_repos, serve_directory
from tests.fixtures.aptrepo.catalog import UBUNTU_DRIVER_VERSION
from tests.fixtures.aptrepo.debs import PackageFile, StubPackage
from tests.fixtures.aptrepo.ubuntu import ubuntu_driver_packages
from tests.fixtures.aptrepo.ubuntu_archive import (
    build_signed_archive,
    ubuntu_archive_driver,
    ubuntu_archive_modules,
)
from tests.support.background import set_up_in_background
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(1800)]

RUNNING = os.uname().release  # the container shares the CI machine's kernel
KERNEL_VERSION = "6.8.0-51.52"
ARCHIVE = Path("ubuntu-archive")
NVIDIA_BUILD = "580.126.16-1ubuntu1"  # NVIDIA's repository (tests/fixtures/aptrepo/ubuntu.py)


def _archive() -> list[StubPackage]:
    """The stand-in of Ubuntu's archive: the running kernel, its meta, the 535-server driver."""
    image = f"linux-image-{RUNNING}"
    return [
        StubPackage(image, KERNEL_VERSION, f"Signed kernel image {RUNNING}", section="kernel",
                    source="linux-signed",
                    files={f"/boot/config-{RUNNING}": PackageFile("# stub kernel config\n")}),
        StubPackage("linux-image-generic", KERNEL_VERSION, "Generic Linux kernel image",
                    section="kernel", source="linux-meta", depends=(image,),
                    files={"/usr/share/doc/linux-image-generic/README.stub": PackageFile("s\n")}),
        *ubuntu_archive_driver(),
        *ubuntu_archive_modules("535", RUNNING, KERNEL_VERSION + "+1"),
        # Ubuntu's own nvidia-graphics-drivers-580, a newer point release than NVIDIA's.
        *ubuntu_driver_packages(UBUNTU_DRIVER_VERSION),
    ]


@dataclass
class OtherDriverRuns:
    host: TargetHost
    runfile_check: PlaybookRun
    untouched_after_check: dict[str, bool]
    prefixed_check: PlaybookRun  # a driver installed with --utility-prefix=/opt/nvidia
    cuda_check: PlaybookRun  # a CUDA toolkit installed by its runfile
    untouched_after_cuda: dict[str, bool]
    ubuntu_set: dict[str, str]       # package -> "version want" after ubuntu-drivers
    first: PlaybookRun
    after_first: dict[str, str]
    audit: str
    apt_check_rc: int
    second: PlaybookRun
    runfile_real: PlaybookRun
    state_before_real: str
    state_after_real: str


def _installed(host: TargetHost) -> dict[str, str]:
    """package -> "version want" (want: install or hold), for every package dpkg knows."""
    listing = host.exec("dpkg-query", "-W", "-f",
                        "${Package} ${Version} ${db:Status-Want} ${db:Status-Status}\\n").stdout
    return {fields[0]: f"{fields[1]} {fields[2]}" if fields[3] == "installed"
            else f"{fields[1]} {fields[2]} {fields[3]}"
            for fields in (line.split() for line in listing.splitlines()) if len(fields) == 4}


def _state(host: TargetHost) -> str:
    """Everything a driver run could change: packages, holds, apt's and modprobe's files."""
    return host.exec("sh", "-c", "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev} "
                     "${db:Status-Want}\\n'; find /etc/apt /etc/modprobe.d -type f "
                     "-exec md5sum {} + | sort").stdout


def _place(host: TargetHost, marks: runfile.Marks) -> None:
    """Write what a runfile left: its files and links."""
    for path, text in marks.files.items():
        host.exec("mkdir", "-p", path.rsplit("/", 1)[0])
        host.exec("tee", path, stdin=text)
    for path, target in marks.links.items():
        host.exec("mkdir", "-p", path.rsplit("/", 1)[0])
        host.exec("ln", "-sf", target, path)


def _remove(host: TargetHost, marks: runfile.Marks) -> None:
    host.exec("rm", "-rf", *marks.files, *marks.links, *marks.directories)


@contextmanager
def _other_driver_runs(workdir: Path) -> Iterator[OtherDriverRuns]:
    repos = build_stub_repos(workdir / "repos")
    build_signed_archive(repos.root / ARCHIVE, _archive())
    with serve_directory(repos.root, workdir / "http.log") as base_url:
        lab = Lab(workdir, repos, base_url, "127.0.0.1:9", target_image())
        host = start_target(lab.target_image, f"tfhost-otherdriver-{os.getpid()}", UBUNTU2404)
        try:
            inventory = write_inventory(workdir / "inventory.yml", host.name)

            def play(log: str, *options: str) -> PlaybookRun:
                return run_playbook(inventory, [lab.vars_file], workdir / log,
                                    "--tags", "nvidia_driver", *options)

            def untouched() -> dict[str, bool]:
                return {path: host.exec("test", "-e", path, check=False).returncode != 0
                        for path in CHECK_MODE_WITNESSES}

            # 1. The .run installers' marks on the fresh host: --check must stop at once.
            default_driver = runfile.driver(runfile.DRIVER_VERSION)
            _place(host, default_driver)
            runfile_check = play("runfile-check.log", "--check")
            untouched_after_check = untouched()
            _remove(host, default_driver)
            prefixed = runfile.driver(runfile.DRIVER_VERSION, utility_prefix="/opt/nvidia")
            _place(host, prefixed)
            prefixed_check = play("runfile-prefix-check.log", "--check")
            _remove(host, prefixed)
            toolkit = runfile.cuda_toolkit("12.8")
            _place(host, toolkit)
            cuda_check = run_playbook(inventory, [lab.vars_file], workdir / "runfile-cuda.log",
                                      "--tags", "cuda_toolkit", "--check")
            untouched_after_cuda = untouched()
            _remove(host, toolkit)
            # 2. `ubuntu-drivers install` on a 24.04 server: Ubuntu's 535-server driver and
            #    Canonical's modules for the kernel flavour in use; the site held them.
            host.exec("sh", "-c", "mkdir -p /etc/apt/keyrings && cat >/etc/apt/keyrings/ubuntu.asc",
                      stdin=(repos.root / ARCHIVE / "key.asc").read_text())
            host.exec("sh", "-c", "echo 'deb [signed-by=/etc/apt/keyrings/ubuntu.asc] "
                                  f"{base_url}/{ARCHIVE}/ /' >/etc/apt/sources.list.d/ubuntu.list")
            host.exec("apt-get", "update", "-qq")
            host.exec("apt-get", "install", "-qq", "-y", "linux-image-generic",
                      "nvidia-driver-535-server", "linux-modules-nvidia-535-server-generic")
            host.exec("sh", "-c", "apt-mark hold $(dpkg-query -W -f '${Package}\\n' "
                                  "'*nvidia*535*' \"linux-signatures-nvidia-*\")")
            ubuntu_set = _installed(host)
            first = play("first.log")
            after_first = _installed(host)
            audit = host.exec("dpkg", "--audit", check=False).stdout
            apt_check = host.exec("apt-get", "check", "-qq", check=False).returncode
            second = play("second.log")
            # 3. The .run installer's marks on the converged host, a real run.
            _place(host, default_driver)
            before = _state(host)
            runfile_real = play("runfile-real.log")
            after = _state(host)
            yield OtherDriverRuns(host, runfile_check, untouched_after_check, prefixed_check,
                                  cuda_check, untouched_after_cuda, ubuntu_set, first,
                                  after_first, audit, apt_check, second, runfile_real, before,
                                  after)
        finally:
            host.remove()


# The slow set-up runs in the background from the session's start; this module's tests
# run after every other test (`run_last`). tests/support/background.py.
other_driver = pytest.fixture(scope="module", name="other_driver")(
    set_up_in_background(__file__, "other-driver", _other_driver_runs, ensure_engine))


def test_a_run_installer_driver_is_refused_first_in_check_mode(
        other_driver: OtherDriverRuns) -> None:
    run = other_driver.runfile_check
    record_timing("ubuntu2404: .run driver refused (--check)", run.seconds)
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("nvidia_driver : Refuse a driver installed by NVIDIA's "
                               ".run installer"), run.explain()
    # (The YAML callback may quote the message and double the apostrophe of "NVIDIA's".)
    said = " ".join(run.output.split())
    wanted = (".run installer (/var/lib/nvidia/log, /var/log/nvidia-installer.log,"
              " /usr/bin/nvidia-uninstall), which the packages would overwrite; nothing was"
              " changed. Fix: run `sudo /usr/bin/nvidia-uninstall`, reboot, and run the play"
              " again.")
    assert wanted in said, run.explain()
    assert run.recap["changed"] == 0 and run.recap["failed"] == 1, run.explain()
    assert other_driver.untouched_after_check == dict.fromkeys(CHECK_MODE_WITNESSES, True)


def test_a_run_installer_driver_under_another_prefix_is_found_by_its_record(
        other_driver: OtherDriverRuns) -> None:
    """`--utility-prefix=/opt/nvidia`: no nvidia-uninstall in /usr/bin; the installer's record
    names /opt/nvidia/bin/nvidia-uninstall, and that is the fix the play gives. Before the fix
    only /usr/bin/nvidia-uninstall was looked for, and the packages went over the driver."""
    run = other_driver.prefixed_check
    record_timing("ubuntu2404: .run driver under /opt/nvidia refused (--check)", run.seconds)
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("nvidia_driver : Refuse a driver installed by NVIDIA's "
                               ".run installer"), run.explain()
    said = " ".join(run.output.split())
    assert "/opt/nvidia/bin/nvidia-uninstall" in said.split("which the packages")[0], said
    assert "Fix: run `sudo /opt/nvidia/bin/nvidia-uninstall`, reboot" in said, run.explain()
    assert run.recap["changed"] == 0, run.explain()


def test_a_cuda_toolkit_installed_by_its_runfile_is_refused_naming_its_uninstaller(
        other_driver: OtherDriverRuns) -> None:
    run = other_driver.cuda_check
    record_timing("ubuntu2404: runfile CUDA toolkit refused (--check)", run.seconds)
    assert run.returncode != 0, run.explain()
    assert run.failed_task == ("cuda_toolkit : Refuse a CUDA toolkit installed by NVIDIA's "
                               "runfile"), run.explain()
    said = " ".join(run.output.split())
    assert ("CUDA toolkit from NVIDIA's runfile (/usr/local/cuda-12.8/bin/cuda-uninstaller), "
            "which the packages would overwrite; nothing was changed. Fix: run "
            "`sudo /usr/local/cuda-12.8/bin/cuda-uninstaller`") in said, run.explain()
    assert run.recap["changed"] == 0, run.explain()
    assert other_driver.untouched_after_cuda == dict.fromkeys(CHECK_MODE_WITNESSES, True)


def test_a_run_installer_driver_is_refused_with_nothing_changed(
        other_driver: OtherDriverRuns) -> None:
    run = other_driver.runfile_real
    record_timing("ubuntu2404: .run driver refused", run.seconds)
    assert run.returncode != 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()
    assert "Fix: run `sudo /usr/bin/nvidia-uninstall`, reboot" in " ".join(run.output.split())
    assert other_driver.state_after_real == other_driver.state_before_real


BRANCH_535 = ("nvidia-driver-535-server", "nvidia-dkms-535-server", "nvidia-utils-535-server",
              "nvidia-kernel-common-535-server", "libnvidia-compute-535-server",
              "nvidia-firmware-535-server-535.288.01", "xserver-xorg-video-nvidia-535-server",
              "linux-modules-nvidia-535-server-generic",
              f"linux-modules-nvidia-535-server-{RUNNING}",
              f"linux-objects-nvidia-535-server-{RUNNING}", f"linux-signatures-nvidia-{RUNNING}")


def _of_535(installed: dict[str, str]) -> list[str]:
    return sorted(name for name, state in installed.items()
                  if "535" in name or state.startswith("535."))


def test_the_ubuntu_archive_driver_was_there_first(other_driver: OtherDriverRuns) -> None:
    installed = other_driver.ubuntu_set
    for name in BRANCH_535:
        assert name in installed, f"{name} missing: {sorted(installed)}"
    assert installed[f"linux-objects-nvidia-535-server-{RUNNING}"].split() == [
        KERNEL_VERSION + "+1", "hold"]


def test_every_package_of_it_is_named_before_the_first_change(
        other_driver: OtherDriverRuns) -> None:
    run = other_driver.first
    record_timing("ubuntu2404: Ubuntu archive 535-server -> 580", run.seconds)
    assert run.returncode == 0, run.explain()
    said = " ".join(run.output.split())
    start = said.index("has driver packages of another branch than 580")
    message = said[start:said.index("then removes all of them", start)]
    named = [*_of_535(other_driver.ubuntu_set), f"linux-signatures-nvidia-{RUNNING}"]
    assert sorted(name for name in named if name not in message) == [], message
    first_change = run.output.index("\nchanged:")
    assert run.output.index("has driver packages of another branch") < first_change


def test_the_configured_branch_replaces_it_and_nothing_of_535_is_left(
        other_driver: OtherDriverRuns) -> None:
    assert other_driver.first.returncode == 0, other_driver.first.explain()
    installed = other_driver.after_first
    for name in ("nvidia-headless-580-open", "nvidia-dkms-580-open", "nvidia-utils-580",
                 "nvidia-compute-utils-580", "nvidia-kernel-common-580",
                 "libnvidia-compute-580"):
        assert name in installed, f"{name} missing: {sorted(installed)}"
        # NVIDIA's build, not the archive's newer point release of the same names
        # (UBUNTU_DRIVER_VERSION): before the fix the branch pin (580.*) matched both.
        assert installed[name].split() == [NVIDIA_BUILD, "hold"], f"{name}: {installed[name]}"
    assert _of_535(installed) == [], "packages of branch 535 are left"
    # Not the driver's: the kernel and its meta, and Debian's dkms, stay.
    for name in (f"linux-image-{RUNNING}", "linux-image-generic", "dkms"):
        assert installed.get(name, "").endswith(" install"), f"{name}: {installed.get(name)}"


def test_dpkg_and_apt_see_a_consistent_set(other_driver: OtherDriverRuns) -> None:
    assert other_driver.audit.strip() == ""
    assert other_driver.apt_check_rc == 0
    half = {name: state for name, state in other_driver.after_first.items()
            if "nvidia" in name and len(state.split()) != 2}
    assert half == {}, f"not fully installed or removed: {half}"


def test_the_rerun_changes_nothing(other_driver: OtherDriverRuns) -> None:
    run = other_driver.second
    record_timing("ubuntu2404: re-run after replacing the Ubuntu archive driver", run.seconds)
    assert run.returncode == 0, run.explain()
    assert run.recap["changed"] == 0, run.explain()
    assert "has driver packages of another branch" not in run.output
