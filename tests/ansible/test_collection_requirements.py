"""requirements.yml asks for collections new enough for every plugin the project uses.

Why a test: the `ansible` package ships every collection, so a requirement that is
too old never shows here; it shows on a site that installs ansible-core and then
`ansible-galaxy collection install -r requirements.yml`, which takes the oldest
release the requirement allows only when a newer one is not already there (an
offline mirror, a pinned constraint). `community.general >= 8.0.0` let 8.0 or 8.1
in, which lack `dnf_config_manager` (added in 8.2.0): the RHEL path then failed at
"couldn't resolve module/action". So every plugin the roles, playbooks and tests
name by FQCN is looked up in the installed collection, and its `version_added`
(and that of each module option a task passes) must be within the requirement.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.version import InvalidVersion, Version

from tests.ansible.playbook import ANSIBLE_DIR, REPO

REQUIREMENTS = ANSIBLE_DIR / "requirements.yml"
# Collections that come with ansible-core itself: nothing to require.
CORE = {"ansible.builtin", "ansible.legacy"}
FQCN = re.compile(r"\b([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\b")
# Where a play, a role or a test names a plugin by its FQCN.
SOURCES = [ANSIBLE_DIR, REPO / "tests", REPO / "Vagrantfile"]
SUFFIXES = {".yml", ".yaml", ".py", ".cfg", ".j2", ""}
# Each plugin type keeps its files (and so its documentation) in its own directory.
PLUGIN_DIRS = ["modules", "filter", "test", "lookup", "connection", "callback", "become",
               "inventory", "action"]
# Task keywords that are not module arguments.
TASK_KEYWORDS = {"name", "when", "register", "loop", "vars", "tags", "notify", "become",
                 "become_user", "changed_when", "failed_when", "check_mode", "no_log",
                 "environment", "delegate_to", "run_once", "until", "retries", "delay",
                 "ignore_errors", "loop_control", "args", "listen", "diff", "throttle"}


@dataclass(frozen=True)
class Use:
    """One plugin (and optionally one of its options) named in one file."""

    collection: str
    plugin: str
    option: str
    where: str


@functools.cache
def _collection_dir(collection: str) -> Path | None:
    """The installed collection (the `ansible` package ships them under ansible_collections)."""
    spec = importlib.util.find_spec("ansible_collections")
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(root, *collection.split("."))
        if (candidate / "MANIFEST.json").is_file():
            return candidate
    return None


@functools.cache
def _documentation(collection: str, plugin: str) -> list[dict[str, Any]]:
    """The DOCUMENTATION of every plugin type this collection has under that name."""
    root = _collection_dir(collection)
    if root is None:
        return []
    docs = []
    for kind in PLUGIN_DIRS:
        sidecar = root / "plugins" / kind / f"{plugin}.yml"
        source = root / "plugins" / kind / f"{plugin}.py"
        if sidecar.is_file():
            docs.append(yaml.safe_load(sidecar.read_text())["DOCUMENTATION"])
        elif source.is_file():
            for node in ast.parse(source.read_text()).body:
                if (isinstance(node, ast.Assign)
                        and any(getattr(t, "id", "") == "DOCUMENTATION" for t in node.targets)
                        and isinstance(node.value, ast.Constant)
                        and isinstance(node.value.value, str)):
                    docs.append(yaml.safe_load(node.value.value))
    return docs


def _version(value: object) -> Version | None:
    """A version_added as a Version; None for "historical" and other non-versions."""
    try:
        return Version(str(value))
    except InvalidVersion:
        return None


def _added(collection: str, plugin: str, option: str) -> tuple[Version | None, bool]:
    """(version_added of the plugin, or of its option when one is named; whether it exists)."""
    docs = _documentation(collection, plugin)
    if option:
        found = [_version((doc.get("options") or {}).get(option, {}).get("version_added"))
                 for doc in docs]
    else:
        found = [_version(doc.get("version_added")) for doc in docs]
    versions = [v for v in found if v is not None]
    return (max(versions) if versions else None), bool(docs)


def _tasks(node: object) -> Iterator[dict[str, Any]]:
    """Every task dict in a task list or play, blocks and handlers included."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks",
                    "handlers"):
            if key in node:
                yield from _tasks(node[key])


def _task_uses(path: Path, text: str) -> Iterator[Use]:
    """Modules a task file calls by FQCN, with each argument they are given."""
    if path.suffix not in {".yml", ".yaml"}:
        return
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError:
        return
    for task in _tasks(document):
        for key, arguments in task.items():
            match = FQCN.fullmatch(str(key))
            if match is None or key in TASK_KEYWORDS:
                continue
            collection = f"{match[1]}.{match[2]}"
            if isinstance(arguments, dict):
                for option in arguments:
                    yield Use(collection, match[3], str(option), str(path.relative_to(REPO)))


def _uses() -> list[Use]:
    """Every FQCN outside ansible-core that the project's plays, roles and tests name."""
    files: list[Path] = []
    for source in SOURCES:
        files += [source] if source.is_file() else sorted(
            p for p in source.rglob("*") if p.is_file() and p.suffix in SUFFIXES
            and "__pycache__" not in p.parts)
    uses = []
    for path in files:
        text = path.read_text(errors="replace")
        where = str(path.relative_to(REPO))
        for match in FQCN.finditer(text):
            collection = f"{match[1]}.{match[2]}"
            if collection in CORE or _collection_dir(collection) is None:
                continue
            uses.append(Use(collection, match[3], "", where))
        uses += [use for use in _task_uses(path, text) if use.collection not in CORE]
    return uses


def _minimum(requirement: object) -> Version:
    """The oldest release a requirements.yml version spec allows ("*" or none: any)."""
    lowest = Version("0")
    for clause in str(requirement or "*").split(","):
        clause = clause.strip()
        if clause.startswith((">=", "==")):
            lowest = max(lowest, Version(clause[2:].strip()))
        elif clause.startswith(">"):
            lowest = max(lowest, Version(clause[1:].strip()))
        elif clause and clause[0].isdigit():
            lowest = max(lowest, Version(clause))
    return lowest


def _required() -> dict[str, Version]:
    entries = yaml.safe_load(REQUIREMENTS.read_text())["collections"]
    return {entry["name"]: _minimum(entry.get("version")) for entry in entries}


USES = _uses()


def test_the_scan_finds_the_plugins_the_roles_use() -> None:
    """A scan that finds nothing would pass anything: it must see what the roles do use."""
    named = {(use.collection, use.plugin) for use in USES}
    assert ("community.general", "dnf_config_manager") in named
    assert ("community.general", "version_sort") in named
    assert ("community.docker", "docker") in named


def test_every_plugin_is_in_a_collection_that_is_installed_and_documents_it() -> None:
    unknown = sorted({f"{u.collection}.{u.plugin} ({u.where})" for u in USES
                      if not _added(u.collection, u.plugin, "")[1]})
    assert unknown == [], "no documentation found for these plugins in the installed collections"


def test_every_collection_used_is_required() -> None:
    required = _required()
    missing = sorted({f"{u.collection} (for {u.collection}.{u.plugin} in {u.where})"
                      for u in USES if u.collection not in required})
    assert missing == [], f"add to {REQUIREMENTS.relative_to(REPO)}: {missing}"


@pytest.mark.parametrize("collection", sorted({use.collection for use in USES}))
def test_requirement_is_at_least_every_version_added(collection: str) -> None:
    minimum = _required().get(collection)
    if minimum is None:
        pytest.skip("not required at all: see test_every_collection_used_is_required")
    too_new = []
    for use in sorted({u for u in USES if u.collection == collection},
                      key=lambda u: (u.plugin, u.option, u.where)):
        added, _ = _added(use.collection, use.plugin, use.option)
        if added is not None and added > minimum:
            what = f"{use.collection}.{use.plugin}"
            what += f" option {use.option}" if use.option else ""
            too_new.append(f"{what} (version_added {added}, {use.where})")
    assert too_new == [], (
        f"{REQUIREMENTS.relative_to(REPO)} allows {collection} {minimum}, older than: "
        + "; ".join(too_new) + f". Require {collection} >= the newest of these.")
