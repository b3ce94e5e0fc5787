"""A host's own entries for a repository the play manages are replaced, and apt/dnf read the rest.

repo_trust's `repo_trust_entries` module decides which lines, stanzas and sections of a
host's apt and dnf configuration are entries for the repository a role writes its own
pinned entry for. The corpus is the vendors' documented files (tests/fixtures/vendor_repos)
in every shape and key path, beside the entry the role's template writes; real apt
(`apt-get indextargets` on a private Dir::Etc) and real dnf (its Python API on a private
reposdir) read the result, before and after. The families around it (Hypothesis) mix
matching, non-matching, commented and disabled entries in one file.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import jinja2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.playbook import ANSIBLE_DIR
from tests.fixtures import vendor_repos
from tests.fixtures.vendor_repos import VendorFile


def _load_module() -> ModuleType:
    path = ANSIBLE_DIR / "roles" / "repo_trust" / "library" / "repo_trust_entries.py"
    spec = importlib.util.spec_from_file_location("repo_trust_entries", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


entries = _load_module()

# The production URLs, as the roles' defaults build them on Debian 12 / Rocky 9 (x86_64).
CUDA_URL = "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"
DOCKER_URL = "https://download.docker.com/linux/debian"
TOOLKIT_BASE = "https://nvidia.github.io/libnvidia-container"
TOOLKIT_URL = f"{TOOLKIT_BASE}/stable/deb/$(ARCH)"
CUDA_RPM_URL = "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64"
DOCKER_RPM_BASE = "https://download.docker.com/linux/centos"
DOCKER_RPM_URL = f"{DOCKER_RPM_BASE}/$releasever/$basearch/stable"
TOOLKIT_RPM_URL = f"{TOOLKIT_BASE}/stable/rpm/$basearch"
APT_SUBSTITUTIONS = {"$(ARCH)": "amd64"}
DNF_SUBSTITUTIONS = {"$basearch": "x86_64", "${basearch}": "x86_64", "$releasever": "9",
                     "${releasever}": "9"}
SOURCES_LIST = "/etc/apt/sources.list"


def _template(role: str, name: str, variables: dict[str, Any]) -> str:
    """The role's own sources file, rendered as the play renders it on Debian 12 amd64."""
    source = (ANSIBLE_DIR / "roles" / role / "templates" / name).read_text()
    facts = {"architecture": "x86_64", "distribution_release": "bookworm"}
    return jinja2.Template(source, keep_trailing_newline=True).render(
        ansible_managed="Ansible managed", ansible_facts=facts, **variables)


OWN_APT = {
    "cuda": ("/etc/apt/sources.list.d/nvidia-cuda.list", CUDA_URL,
             _template("nvidia_driver", "nvidia-cuda.list.j2",
                       {"nvidia_driver_cuda_repo_url": CUDA_URL})),
    "docker": ("/etc/apt/sources.list.d/docker.list", DOCKER_URL,
               _template("docker", "docker.list.j2",
                         {"docker_ce_repo_url": DOCKER_URL, "docker_ce_repo_channel": "stable"})),
    "toolkit": ("/etc/apt/sources.list.d/nvidia-container-toolkit.list", TOOLKIT_URL,
                _template("nvidia_container_toolkit", "nvidia-container-toolkit.list.j2",
                          {"nvidia_container_toolkit_apt_repo_url": TOOLKIT_URL})),
}


OWN_APT_KEYRING = {"cuda": "/etc/apt/keyrings/nvidia-cuda.asc",
                   "docker": "/etc/apt/keyrings/docker.asc",
                   "toolkit": "/etc/apt/keyrings/nvidia-container-toolkit.asc"}


def apply(files: dict[str, str], changes: list[Any]) -> dict[str, str]:
    """What the module writes (the caller's own file is the caller's to rewrite)."""
    after = dict(files)
    for change in changes:
        if change.own:
            continue
        if change.text is None:
            del after[change.path]
        else:
            after[change.path] = change.text
    return after


def plan_apt(vendor: str, files: dict[str, str]) -> tuple[list[Any], dict[str, str]]:
    """The module's plan for the role of `vendor`, then the role's template written."""
    own, url, content = OWN_APT[vendor]
    changes = entries.plan("apt", url, own, "", APT_SUBSTITUTIONS, files, SOURCES_LIST,
                           OWN_APT_KEYRING[vendor])
    after = apply(files, changes)
    after[own] = content
    return changes, after


# --- Real apt and dnf read the files -----------------------------------------------------------


def apt_reads(files: dict[str, str], root: Path) -> str:
    """What apt says reading these sources (its errors and warnings); '' when clean."""
    if shutil.which("apt-get") is None:
        pytest.skip("apt-get is not installed on this machine")
    shutil.rmtree(root, ignore_errors=True)
    (root / "etc" / "sources.list.d").mkdir(parents=True)
    (root / "state" / "lists" / "partial").mkdir(parents=True)
    (root / "cache" / "archives" / "partial").mkdir(parents=True)
    (root / "etc" / "sources.list").write_text("")
    for path, content in files.items():
        (root / "etc" / path.removeprefix("/etc/apt/")).write_text(content)
    result = subprocess.run(
        ["apt-get", "-o", f"Dir::Etc={root / 'etc'}", "-o", f"Dir::State={root / 'state'}",
         "-o", f"Dir::Cache={root / 'cache'}", "indextargets"],
        capture_output=True, text=True, check=False)
    return (result.stderr + ("" if result.returncode == 0 else f"rc {result.returncode}")).strip()


DNF_READER = """
import dnf, json, sys
base = dnf.Base()
base.conf.reposdir = [sys.argv[1]]
base.conf.substitutions.update({"releasever": "9", "basearch": "x86_64"})
base.read_all_repos()
print(json.dumps([[repo.id, list(repo.baseurl), list(repo.gpgkey), bool(repo.enabled)]
                  for repo in base.repos.values()]))
"""


def dnf_reads(files: dict[str, str], root: Path) -> tuple[list[list[Any]], str]:
    """(the repositories dnf configures from these files, its warnings)."""
    python = Path("/usr/bin/python3")
    if not python.exists() or subprocess.run([str(python), "-c", "import dnf"],
                                             capture_output=True, check=False).returncode:
        pytest.skip("python3-dnf is not installed on this machine")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for path, content in files.items():
        (root / Path(path).name).write_text(content)
    result = subprocess.run([str(python), "-c", DNF_READER, str(root)], capture_output=True,
                            text=True, check=True)
    return json.loads(result.stdout), result.stderr.strip()


# --- The vendors' files, one at a time, beside the role's own entry ---------------------------

KEYRINGS = {"cuda": [vendor_repos.CUDA_KEYRING, "/etc/apt/keyrings/nvidia-cuda.asc"],
            "docker": list(vendor_repos.DOCKER_KEYRINGS),
            "toolkit": [vendor_repos.TOOLKIT_KEYRING,
                        "/etc/apt/keyrings/nvidia-container-toolkit.asc"]}
APT_VENDOR_FILES: list[tuple[str, Callable[[str], VendorFile]]] = [
    ("cuda", lambda keyring: vendor_repos.cuda_list(CUDA_URL)),
    ("docker", lambda keyring: vendor_repos.docker_sources(DOCKER_URL, keyring=keyring)),
    ("docker", lambda keyring: vendor_repos.docker_list(DOCKER_URL, keyring=keyring)),
    ("toolkit", lambda keyring: vendor_repos.toolkit_list(TOOLKIT_BASE, keyring=keyring)),
]
APT_CASES = [pytest.param(vendor, make(keyring), id=f"{make(keyring).path}:{keyring}")
             for vendor, make in APT_VENDOR_FILES for keyring in KEYRINGS[vendor]
             if vendor != "cuda" or keyring == vendor_repos.CUDA_KEYRING]


@pytest.mark.parametrize(("vendor", "existing"), APT_CASES)
def test_a_vendors_apt_entry_is_replaced_and_apt_reads_the_rest(
        vendor: str, existing: VendorFile, tmp_path: Path) -> None:
    own, _, content = OWN_APT[vendor]
    before = {existing.path: existing.content, own: content}
    said = apt_reads(before, tmp_path / "before")
    if existing.path != own and existing.keyring != OWN_APT_KEYRING[vendor]:
        assert "Conflicting values set for option Signed-By" in said  # what the issue saw
    changes, after = plan_apt(vendor, {existing.path: existing.content})
    assert apt_reads(after, tmp_path / "after") == ""
    assert set(after) == {own}, "the vendor's file should be gone (it held nothing else)"
    if existing.path == own and existing.keyring == OWN_APT_KEYRING[vendor]:
        assert changes == []  # already trusts the role's keyring; the template rewrites it
        return
    (change,) = changes
    message = change.message(own, "entry for")
    assert "\n" not in message
    assert existing.keyring in message and own in message
    if existing.path == own:  # the role's template rewrites it; the module names it
        assert change.own
        assert message.startswith(f"Replacing {own} (entry for ")
    else:
        assert message.startswith(f"Replaced {existing.path} (entry for ")
    # --check changes nothing: its line says what a real run would do, naming the same file.
    planned = change.message(own, "entry for", check_mode=True)
    assert planned.startswith(f"Would replace {existing.path} (entry for "), planned
    assert "\n" not in planned and existing.keyring in planned and own in planned
    assert not any(word in planned for word in ("Replaced", "Replacing", "removed", "are kept"))


@pytest.mark.parametrize("vendor", list(OWN_APT))
def test_the_roles_own_entry_is_left_alone(vendor: str) -> None:
    """What a converged host has: nothing to replace, nothing to say (the re-run is quiet)."""
    own, _, content = OWN_APT[vendor]
    assert plan_apt(vendor, {own: content})[0] == []


def test_all_three_vendors_at_once_as_a_hand_set_up_host_has_them(tmp_path: Path) -> None:
    """cuda-keyring's list, Docker's docker.sources and the toolkit's list, then each role."""
    host = {file.path: file.content for file in (
        vendor_repos.cuda_list(CUDA_URL), vendor_repos.docker_sources(DOCKER_URL),
        vendor_repos.toolkit_list(TOOLKIT_BASE))}
    host[SOURCES_LIST] = "deb http://deb.debian.org/debian bookworm main\n"
    assert apt_reads(host, tmp_path / "before") == ""  # consistent before the play
    for vendor in ("cuda", "docker", "toolkit"):
        _, host = plan_apt(vendor, host)
        assert apt_reads(host, tmp_path / vendor) == "", f"after the {vendor} role"
    assert set(host) == {SOURCES_LIST, *(own for own, _, _ in OWN_APT.values())}
    assert host[SOURCES_LIST] == "deb http://deb.debian.org/debian bookworm main\n"


def test_a_mixed_file_keeps_its_other_entries(tmp_path: Path) -> None:
    mixed = ("# Site repositories\n"
             "deb http://deb.debian.org/debian bookworm main\n"
             f"deb [signed-by={vendor_repos.CUDA_KEYRING}] {CUDA_URL}/ /\n"
             "deb [signed-by=/etc/apt/keyrings/site.asc] https://apt.example.invalid/ stable main\n"
             f"deb-src [signed-by={vendor_repos.CUDA_KEYRING}] {CUDA_URL} /   # sources too\n")
    changes, after = plan_apt("cuda", {"/etc/apt/sources.list.d/site.list": mixed})
    assert after["/etc/apt/sources.list.d/site.list"] == (
        "# Site repositories\n"
        "deb http://deb.debian.org/debian bookworm main\n"
        "deb [signed-by=/etc/apt/keyrings/site.asc] https://apt.example.invalid/ stable main\n")
    (change,) = changes
    assert change.message("/own", "entry for").endswith("the file's other entries are kept.")
    assert apt_reads(after, tmp_path) == ""


def test_the_main_sources_list_loses_only_the_line(tmp_path: Path) -> None:
    files = {SOURCES_LIST: f"deb [signed-by={vendor_repos.CUDA_KEYRING}] {CUDA_URL}/ /\n"}
    _, after = plan_apt("cuda", files)
    assert after[SOURCES_LIST] == ""  # emptied, never removed
    assert apt_reads(after, tmp_path) == ""


def test_a_multi_uri_stanza_keeps_its_other_uris(tmp_path: Path) -> None:
    stanza = ("# Docker, and the site's mirror of it\n"
              "Types: deb\n"
              f"URIs: https://mirror.example.invalid/docker/debian {DOCKER_URL}\n"
              "Suites: bookworm\n"
              "Components: stable\n"
              "Signed-By: /etc/apt/keyrings/docker.gpg\n"
              "\n"
              "Types: deb\n"
              "URIs: http://deb.debian.org/debian\n"
              "Suites: bookworm\n"
              "Components: main\n")
    _, after = plan_apt("docker", {"/etc/apt/sources.list.d/site.sources": stanza})
    assert after["/etc/apt/sources.list.d/site.sources"] == stanza.replace(
        f"URIs: https://mirror.example.invalid/docker/debian {DOCKER_URL}\n",
        "URIs: https://mirror.example.invalid/docker/debian\n")
    assert apt_reads(after, tmp_path) == ""


def test_disabled_entries_are_left_as_they_are(tmp_path: Path) -> None:
    disabled = vendor_repos.docker_sources(DOCKER_URL, keyring="/etc/apt/keyrings/docker.gpg")
    files = {disabled.path: disabled.content + "Enabled: no\n",
             "/etc/apt/sources.list.d/old.list": f"# deb {DOCKER_URL} bookworm stable\n"}
    changes, after = plan_apt("docker", files)
    assert changes == []
    assert apt_reads(after, tmp_path) == ""


@pytest.mark.parametrize("uri", [
    "http://download.docker.com/linux/debian", "https://DOWNLOAD.docker.com/linux/debian/",
    "https://download.docker.com//linux/debian//"])
def test_the_same_repository_written_differently_is_replaced(uri: str) -> None:
    changes, _ = plan_apt("docker", {"/etc/apt/sources.list.d/d.list":
                                     f"deb [arch=amd64] {uri} bookworm stable\n"})
    assert [change.text for change in changes] == [None]


@pytest.mark.parametrize("line", [
    f"deb [signed-by={vendor_repos.TOOLKIT_KEYRING}] {TOOLKIT_BASE}/stable/deb/amd64 /",
    f"deb [signed-by={vendor_repos.TOOLKIT_KEYRING}] {TOOLKIT_BASE}/stable/deb/$(ARCH)/ /"])
def test_the_toolkit_entry_with_its_architecture_spelled_out_is_replaced(line: str) -> None:
    changes, _ = plan_apt("toolkit", {"/etc/apt/sources.list.d/t.list": line + "\n"})
    assert len(changes) == 1


@pytest.mark.parametrize("line", [
    f"deb {TOOLKIT_BASE}/experimental/deb/$(ARCH) /",
    "deb https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/ /",
    "deb https://download.docker.com/linux/ubuntu jammy stable",
    f"deb-foo {CUDA_URL}/ /"])
def test_other_repositories_are_not_touched(line: str) -> None:
    for vendor in OWN_APT:
        changes, _ = plan_apt(vendor, {"/etc/apt/sources.list.d/x.list": line + "\n"})
        assert changes == [], vendor


# --- dnf -------------------------------------------------------------------------------------

DNF_KEYRINGS = {"cuda": "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda",
                "docker": "/etc/pki/rpm-gpg/RPM-GPG-KEY-docker-ce",
                "toolkit": "/etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit"}
OWN_DNF = {
    "cuda": ("/etc/yum.repos.d/cuda-rhel9-x86_64.repo", "cuda-rhel9-x86_64", CUDA_RPM_URL,
             "[cuda-rhel9-x86_64]\nname=NVIDIA CUDA rhel9 x86_64\n"
             f"baseurl={CUDA_RPM_URL}\ngpgcheck=1\n"
             "gpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda\nenabled=1\n"),
    "docker": ("/etc/yum.repos.d/docker-ce-stable.repo", "docker-ce-stable", DOCKER_RPM_URL,
               f"[docker-ce-stable]\nname=Docker CE stable\nbaseurl={DOCKER_RPM_URL}\n"
               "gpgcheck=1\ngpgkey=file:///etc/pki/rpm-gpg/RPM-GPG-KEY-docker-ce\nenabled=1\n"),
    "toolkit": ("/etc/yum.repos.d/nvidia-container-toolkit.repo", "nvidia-container-toolkit",
                TOOLKIT_RPM_URL, ""),  # written into the vendor's own file: see below
}


def plan_dnf(vendor: str, files: dict[str, str]) -> tuple[list[Any], dict[str, str]]:
    own, repo_id, url, content = OWN_DNF[vendor]
    changes = entries.plan("dnf", url, own, repo_id, DNF_SUBSTITUTIONS, files,
                           keyring=DNF_KEYRINGS[vendor])
    after = apply(files, changes)
    if content:
        after[own] = content
    return changes, after


def test_nvidias_cuda_repo_file_is_replaced_and_dnf_uses_the_pinned_key(tmp_path: Path) -> None:
    vendor = vendor_repos.cuda_repo(CUDA_RPM_URL)
    own, repo_id, _, content = OWN_DNF["cuda"]
    repos, warnings = dnf_reads({vendor.path: vendor.content, own: content}, tmp_path / "a")
    assert "listed more than once" in warnings  # and dnf took the vendor's gpgkey URL:
    assert [repo[2] for repo in repos if repo[0] == repo_id] == [[vendor.keyring]]
    changes, after = plan_dnf("cuda", {vendor.path: vendor.content})
    repos, warnings = dnf_reads(after, tmp_path / "b")
    assert warnings == ""
    assert repos == [[repo_id, [CUDA_RPM_URL], ["file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-cuda"],
                      True]]
    (change,) = changes
    assert change.message(own, "repository") == (
        f"Replaced {vendor.path} (repository [cuda-rhel9-x86_64]; gpgkey {vendor.keyring}) with "
        f"{own}, which trusts only the pinned key; removed the file, which held nothing else.")


def test_dockers_repo_file_loses_only_the_stable_channel(tmp_path: Path) -> None:
    vendor = vendor_repos.docker_ce_repo(DOCKER_RPM_BASE)
    changes, after = plan_dnf("docker", {vendor.path: vendor.content})
    (change,) = changes
    assert change.entries == ["[docker-ce-stable]"]
    assert change.message("/etc/yum.repos.d/docker-ce-stable.repo", "repository",
                          check_mode=True).startswith(
        f"Would replace the repository [docker-ce-stable] in {vendor.path} (")
    assert "[docker-ce-stable]" not in after[vendor.path]
    assert after[vendor.path].count("[docker-ce-") == 4
    repos, warnings = dnf_reads(after, tmp_path)
    assert warnings == ""
    enabled = [repo for repo in repos if repo[3]]
    assert enabled == [["docker-ce-stable", [DOCKER_RPM_URL.replace(
        "$releasever", "9").replace("$basearch", "x86_64")],
        ["file:///etc/pki/rpm-gpg/RPM-GPG-KEY-docker-ce"], True]]


def test_the_toolkits_repo_file_is_the_roles_own_and_keeps_experimental() -> None:
    """The role's yum_repository rewrites its section in NVIDIA's own file; nothing else goes."""
    vendor = vendor_repos.toolkit_repo(TOOLKIT_BASE)
    changes, after = plan_dnf("toolkit", {vendor.path: vendor.content})
    (change,) = changes
    assert change.own and after == {vendor.path: vendor.content}
    assert change.message(vendor.path, "repository") == (
        f"Replacing {vendor.path} (repository [nvidia-container-toolkit]; gpgkey "
        f"{vendor.keyring}): the role writes its own entry there, which trusts only the pinned "
        "key.")
    ours = vendor.content.replace(f"gpgkey={vendor.keyring}",
                                  f"gpgkey=file://{DNF_KEYRINGS['toolkit']}", 1)
    assert plan_dnf("toolkit", {vendor.path: ours})[0] == []


def test_a_same_id_section_elsewhere_goes_even_when_disabled() -> None:
    files = {"/etc/yum.repos.d/old.repo": "[docker-ce-stable]\nname=x\n"
                                          "baseurl=https://mirror.example.invalid/docker\n"
                                          "enabled=0\n\n[keep]\nname=k\nbaseurl=https://k/\n"}
    changes, after = plan_dnf("docker", files)
    assert [change.entries for change in changes] == [["[docker-ce-stable]"]]
    assert after["/etc/yum.repos.d/old.repo"].startswith("[keep]\n") or "[keep]" in after[
        "/etc/yum.repos.d/old.repo"]
    assert "docker-ce-stable" not in after["/etc/yum.repos.d/old.repo"]


def test_a_disabled_section_with_the_url_under_another_id_is_left() -> None:
    files = {"/etc/yum.repos.d/old.repo": f"[old-cuda]\nbaseurl={CUDA_RPM_URL}/\nenabled=0\n"}
    assert plan_dnf("cuda", files)[0] == []


# --- Families --------------------------------------------------------------------------------

MATCHING_LINES = [
    f"deb [signed-by={vendor_repos.CUDA_KEYRING}] {CUDA_URL}/ /",
    f"deb {CUDA_URL} /",
    f"deb [ arch=amd64 signed-by=/k.gpg ] {CUDA_URL.replace('https', 'http')}/ /",
    f"deb-src [trusted=yes] {CUDA_URL.replace('developer.download', 'Developer.Download')} /",
    f"  deb [signed-by=/x.asc] {CUDA_URL}// /   # indented, with a comment",
]
OTHER_LINES = [
    "deb http://deb.debian.org/debian bookworm main",
    "deb [signed-by=/etc/apt/keyrings/site.asc] https://apt.example.invalid/ stable main",
    f"# deb {CUDA_URL}/ /",
    "",
    "# a comment",
    f"deb {CUDA_URL.replace('debian12', 'ubuntu2404')}/ /",
]


@settings(max_examples=150)
@given(chosen=st.lists(st.tuples(st.booleans(), st.integers(0, 99)), max_size=12),
       main=st.booleans())
def test_list_files_lose_exactly_the_managed_entries(chosen: list[tuple[bool, int]],
                                                     main: bool) -> None:
    lines = [(MATCHING_LINES if matching else OTHER_LINES)[index % len(
        MATCHING_LINES if matching else OTHER_LINES)] for matching, index in chosen]
    path = SOURCES_LIST if main else "/etc/apt/sources.list.d/site.list"
    text = "".join(line + "\n" for line in lines)
    changes, after = plan_apt("cuda", {path: text})
    others = [line + "\n" for line in lines if line in OTHER_LINES]
    if not any(line in MATCHING_LINES for line in lines):
        assert changes == []
    elif main or any(entries.one_line_entry(line) for line in others):
        assert after[path] == "".join(others)
    else:
        assert path not in after


STANZA_URIS = [CUDA_URL, f"{CUDA_URL}/", "https://mirror.example.invalid/cuda",
               "http://deb.debian.org/debian"]


@settings(max_examples=150)
@given(stanza_list=st.lists(st.tuples(st.lists(st.sampled_from(STANZA_URIS), min_size=1,
                                               max_size=3, unique=True), st.booleans()),
                            min_size=1, max_size=4))
def test_sources_files_lose_exactly_the_managed_uris(
        stanza_list: list[tuple[list[str], bool]]) -> None:
    text = "\n".join(
        f"Types: deb\nURIs: {' '.join(uris)}\nSuites: /\n"
        f"Signed-By: {vendor_repos.CUDA_KEYRING}\n" + ("Enabled: no\n" if disabled else "")
        for uris, disabled in stanza_list)
    path = "/etc/apt/sources.list.d/site.sources"
    changes, after = plan_apt("cuda", {path: text})
    target = entries.normalise(CUDA_URL, {})
    expected = []
    for uris, disabled in stanza_list:
        kept = uris if disabled else [uri for uri in uris
                                      if entries.normalise(uri, {}) != target]
        if kept:
            expected.append((kept, disabled))
    if expected == [(uris, disabled) for uris, disabled in stanza_list]:
        assert changes == []
        return
    if not expected:
        assert path not in after
        return
    found = [(stanza.value("uris").split(), stanza.value("enabled") == "no")
             for stanza in entries.stanzas(after[path].splitlines(keepends=True))]
    assert found == expected


SECTIONS = [
    ("cuda-rhel9-x86_64", CUDA_RPM_URL, "1"),
    ("cuda-rhel9-x86_64", "https://mirror.example.invalid/cuda", "0"),
    ("nvidia-cuda", f"{CUDA_RPM_URL}/", "1"),
    ("nvidia-cuda-off", CUDA_RPM_URL, "0"),
    ("baseos", "https://mirror.example.invalid/rocky/$releasever/BaseOS/$basearch/os/", "1"),
    ("epel", "https://mirror.example.invalid/epel/9/Everything/x86_64/", "1"),
]


@settings(max_examples=150)
@given(chosen=st.lists(st.sampled_from(SECTIONS), min_size=1, max_size=5, unique_by=lambda
                       section: section[0]))
def test_repo_files_lose_exactly_the_managed_sections(
        chosen: list[tuple[str, str, str]]) -> None:
    text = "".join(f"[{name}]\nname={name}\nbaseurl={url}\nenabled={enabled}\ngpgcheck=1\n\n"
                   for name, url, enabled in chosen)
    path = "/etc/yum.repos.d/site.repo"
    changes, after = plan_dnf("cuda", {path: text})
    target = entries.normalise(CUDA_RPM_URL, DNF_SUBSTITUTIONS)
    gone = [name for name, url, enabled in chosen if name == "cuda-rhel9-x86_64" or (
        enabled == "1" and entries.normalise(url, DNF_SUBSTITUTIONS) == target)]
    left = [name for name, _, _ in chosen if name not in gone]
    assert [f"[{name}]" for name in gone] == [entry for change in changes
                                              for entry in change.entries]
    if not left:
        assert path not in after
    elif gone:
        assert [section.name for section in entries.sections(
            after[path].splitlines(keepends=True))] == left
