"""ansible/library/dpkg_package_facts.py: package_facts' apt list, from one dpkg-query.

The roles read the installed packages from `ansible_facts['packages']` in the shape
`ansible.builtin.package_facts` (manager apt) gives it; on Debian and Ubuntu they now get
it from dpkg's database directly (package_facts builds python-apt's cache of every indexed
package first: about two seconds a call, six calls in a first converge). The container
test compares the two on a real dpkg database with the states that differ between "in
dpkg's database" and "installed": a foreign-architecture package (keyed `name:arch` by
python-apt) and a removed package whose configuration files stay (`rc`, not installed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.ansible.filter_plugin import load_library_module
from tests.ansible.playbook import ANSIBLE_DIR, run_local_play, run_playbook, write_inventory
from tests.ansible.target import docker, start_target, target_image
from tests.fixtures.aptrepo.debs import StubPackage, build_deb

facts = load_library_module("dpkg_package_facts.py")


def _line(status: str, name: str, version: str, arch: str, section: str = "libs",
          want: str = "install") -> str:
    return "\t".join([want, status, name, version, arch, section])


def test_states_and_architectures_are_keyed_as_python_apt_keys_them() -> None:
    listing = "\n".join([
        _line("installed", "libc6", "2.36-9+deb12u14", "amd64"),
        _line("installed", "libc6", "2.36-9+deb12u14", "i386"),
        _line("installed", "ca-certificates", "20230311+deb12u1", "all", "misc"),
        _line("config-files", "procps", "2:4.0.2-3", "amd64", "admin"),
        _line("not-installed", "nvidia-smi", "", "amd64"),
        _line("half-configured", "nvidia-kernel-dkms", "1:580.126.16-1", "amd64", "contrib/kernel"),
        _line("unpacked", "docker.io", "20.10.24+dfsg1-1+deb12u1", "amd64", "admin"),
    ]) + "\n"
    packages = facts.installed_packages(listing, "amd64")
    assert sorted(packages) == ["ca-certificates", "docker.io", "libc6", "libc6:i386",
                                "nvidia-kernel-dkms"]
    assert packages["libc6:i386"] == [{"name": "libc6:i386", "version": "2.36-9+deb12u14",
                                       "arch": "i386", "category": "libs", "source": "apt"}]
    # The epoch stays in the version, as python-apt reports it.
    assert packages["nvidia-kernel-dkms"][0]["version"] == "1:580.126.16-1"
    # Another host's own architecture is the one without a suffix there.
    assert sorted(facts.installed_packages(listing, "i386")) == [
        "ca-certificates", "docker.io:amd64", "libc6", "libc6:amd64", "nvidia-kernel-dkms:amd64"]


def test_lines_that_are_not_six_fields_are_skipped() -> None:
    assert facts.installed_packages("\n\ninstalled\tx\n" + _line("installed", "a", "1", "amd64")
                                    + "\tmore\n", "amd64") == {}


def test_holds_are_the_packages_whose_selection_is_hold() -> None:
    """What `apt-mark showhold` lists: a held package, installed or not, keyed as installed ones."""
    listing = "\n".join([
        _line("installed", "nvidia-driver", "580.126.16-1", "amd64", want="hold"),
        _line("installed", "libcuda1", "580.126.16-1", "i386", want="hold"),
        _line("not-installed", "cudnn9-cuda-12", "", "amd64", want="hold"),
        _line("installed", "docker.io", "20.10.24+dfsg1-1+deb12u1", "amd64"),
        _line("config-files", "procps", "2:4.0.2-3", "amd64", want="deinstall"),
    ]) + "\n"
    assert facts.held_packages(listing, "amd64") == ["cudnn9-cuda-12", "libcuda1:i386",
                                                     "nvidia-driver"]
    assert facts.held_packages(_line("installed", "a", "1", "amd64"), "amd64") == []


PLAY = [{
    "name": "Both lists of the installed packages",
    "hosts": "gpu_hosts",
    "gather_facts": False,
    "tasks": [
        {"name": "package_facts, as the roles listed them before",
         "ansible.builtin.package_facts": {"manager": "apt"}},
        {"name": "Keep it",
         "ansible.builtin.set_fact": {"from_apt": "{{ ansible_facts['packages'] }}"}},
        {"name": "apt-mark showhold, as the roles read the holds before",
         "ansible.builtin.command": "apt-mark showhold", "register": "showhold",
         "changed_when": False},
        {"name": "dpkg_package_facts", "dpkg_package_facts": {}},
        {"name": "Write both", "delegate_to": "localhost",
         "ansible.builtin.copy": {
             "dest": "{{ lists_file }}",
             "content": "{{ {'apt': from_apt, 'dpkg': ansible_facts['packages'],"
                        " 'showhold': showhold.stdout_lines,"
                        " 'holds': ansible_facts['dpkg_holds']} | to_json }}"}},
    ],
}]


@pytest.mark.docker
def test_the_list_is_package_facts_list_on_a_real_dpkg_database(docker_host: str,
                                                                 tmp_path: Path) -> None:
    host = start_target(target_image(), f"tfhost-dpkg-facts-{os.getpid()}")
    try:
        foreign = build_deb(StubPackage("tfhost-foreign-lib", "1:1.0-1",
                                        "a library of another architecture (stub)",
                                        architecture="i386", section="libs"), tmp_path)
        docker("cp", str(foreign), f"{host.name}:/root/{foreign.name}")
        host.exec("dpkg", "--add-architecture", "i386")
        host.exec("dpkg", "--install", f"/root/{foreign.name}")
        # Held: an installed package, one of the foreign architecture.
        host.exec("apt-mark", "hold", "tfhost-foreign-lib:i386", "ca-certificates")
        # procps keeps its conffiles (/etc/sysctl.conf) after a removal: state config-files.
        host.exec("dpkg", "--remove", "--force-depends", "procps")
        assert host.exec("dpkg-query", "--show", "--showformat", "${db:Status-Abbrev}",
                         "procps").stdout.strip() == "rc"
        play = tmp_path / "lists.yml"
        play.write_text(yaml.safe_dump(PLAY, sort_keys=False))
        lists = tmp_path / "lists.json"
        run = run_playbook(write_inventory(tmp_path / "inventory.yml", host.name),
                           [], tmp_path / "lists.log", "-e", f"lists_file={lists}",
                           playbook=str(play), vault=None)
        assert run.returncode == 0, run.explain()
    finally:
        host.remove()
    both = json.loads(lists.read_text())
    from_apt = {name: [{key: value for key, value in entry.items() if key != "origin"}
                       for entry in entries] for name, entries in both["apt"].items()}
    assert both["dpkg"] == from_apt
    assert "tfhost-foreign-lib:i386" in both["dpkg"]
    assert "procps" not in both["dpkg"]
    assert both["holds"] == sorted(both["showhold"])
    assert "ca-certificates" in both["holds"]


STATUS = """Package: held-installed
Status: hold ok installed
Priority: optional
Section: misc
Maintainer: x <x@example.org>
Architecture: amd64
Version: 1.0
Description: x

Package: held-before-its-install
Status: hold ok not-installed
Priority: optional
Section: misc
Architecture: amd64

Package: held-config-files
Status: hold ok config-files
Priority: optional
Section: misc
Maintainer: x <x@example.org>
Architecture: amd64
Version: 1.0
Config-Version: 1.0
Description: x

Package: libheld
Status: hold ok installed
Priority: optional
Section: libs
Maintainer: x <x@example.org>
Architecture: i386
Multi-Arch: same
Version: 1.0
Description: x

Package: removed
Status: deinstall ok installed
Priority: optional
Section: misc
Maintainer: x <x@example.org>
Architecture: amd64
Version: 1.0
Description: x
"""


@pytest.mark.skipif(shutil.which("dpkg-query") is None or shutil.which("apt-mark") is None,
                    reason="needs dpkg-query and apt-mark (a Debian controller)")
def test_the_holds_are_what_apt_mark_showhold_lists(tmp_path: Path) -> None:
    """The module's own dpkg-query, on a dpkg database of its own (--admindir), against
    apt-mark showhold on the same database: a package held before it was installed, one
    held with only its configuration left, a foreign architecture's."""
    admin = tmp_path / "dpkg"
    (admin / "info").mkdir(parents=True)
    (admin / "updates").mkdir()
    (admin / "available").write_text("")
    (admin / "status").write_text(STATUS)
    query = [facts.QUERY[0], f"--admindir={admin}", *facts.QUERY[1:]]
    listing = subprocess.run(query, capture_output=True, text=True, check=True).stdout
    (tmp_path / "lists" / "partial").mkdir(parents=True)
    showhold = subprocess.run(
        ["apt-mark", "-o", f"Dir::State::status={admin / 'status'}",
         "-o", f"Dir::State::Lists={tmp_path / 'lists'}", "-o", f"Dir::Cache={tmp_path / 'cache'}",
         "-o", f"Dir::State::extended_states={tmp_path / 'extended_states'}",
         "-o", f"Dir::Etc::SourceList={tmp_path / 'sources.list'}",
         "-o", f"Dir::Etc::SourceParts={tmp_path}", "-o", f"Dir::Etc::Preferences={tmp_path / 'p'}",
         "-o", f"Dir::Etc::PreferencesParts={tmp_path}",
         "-o", "APT::Architecture=amd64", "-o", "APT::Architectures::=amd64",
         "-o", "APT::Architectures::=i386", "showhold"],
        capture_output=True, text=True, check=True).stdout.split()
    assert sorted(showhold) == ["held-before-its-install", "held-config-files", "held-installed",
                                "libheld:i386"]
    assert facts.held_packages(listing, "amd64") == sorted(showhold)
    assert sorted(facts.installed_packages(listing, "amd64")) == [
        "held-installed", "libheld:i386", "removed"]


def test_the_driver_holds_again_what_its_unhold_lifted_where_the_list_was_not_read_again(
        tmp_path: Path) -> None:
    """nvidia_driver's hold reads the holds from the package list; the unhold before a flavour
    change lifts this branch's holds, and where nothing was installed after it (the list not
    read again) the list still names them held: the hold must hold them again. The role's own
    two tasks, after dpkg_package_facts, against dpkg, dpkg-query and apt-mark stubs."""
    tasks = yaml.safe_load((ANSIBLE_DIR / "roles" / "nvidia_driver" / "tasks"
                            / "setup-Debian.yml").read_text())
    chosen = [task for task in tasks if str(task.get("name", "")).startswith(
        ("Unhold the driver packages that must move", "Hold the driver packages so upgrades"))]
    assert len(chosen) == 2
    stubs, log = tmp_path / "bin", tmp_path / "apt-mark.log"
    stubs.mkdir()
    listing = "".join(f"hold\tinstalled\t{name}\t580.1\tamd64\tlibs\\n"
                      for name in ("libcuda1", "nvidia-driver"))
    for name, body in {"dpkg": "echo amd64", "dpkg-query": f"printf '{listing}'",
                       "apt-mark": f'echo "$*" >> {log}'}.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {
        "nvidia_driver_hold": True, "__nvidia_driver_other_branch": [],
        "__nvidia_driver_other_flavour": ["nvidia-kernel-open-dkms"],
        "__nvidia_driver_this_branch_query": ["libcuda1", "nvidia-driver"]},
        "tasks": [{"name": "List", "dpkg_package_facts": {}}, *chosen]}]
    run = run_local_play(tmp_path, play,
                         search_path=f"{stubs}:{os.environ.get('PATH', '')}")
    assert run.returncode == 0, run.explain()
    assert log.read_text().splitlines() == ["unhold libcuda1 nvidia-driver",
                                            "hold libcuda1 nvidia-driver"]
