#!/usr/bin/python
"""Ansible module: replace a host's other entries for the repository a role manages."""

from __future__ import annotations

import glob
import os
import re
import tempfile
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: repo_trust_entries
short_description: Replace a host's other entries for one package repository
description:
  - A host set up by hand or by a vendor's package often has its own entry for a repository the
    play manages (cuda-keyring's C(cuda-debian12-x86_64.list), Docker's C(docker.list) or deb822
    C(docker.sources), the container toolkit's C(nvidia-container-toolkit.list), NVIDIA's
    C(cuda-rhel9.repo), Docker's C(docker-ce.repo)). apt stops on two entries for one URI whose
    Signed-By differ ("Conflicting values set for option Signed-By"); dnf reads one of two
    sections with the same id (the vendor's, whose gpgkey is a URL) and ignores the other.
  - Finds every enabled entry for the repository's URL outside the caller's own file (apt -
    C(sources.list), C(sources.list.d/*.list) one-line entries and C(*.sources) deb822
    stanzas, multi-URI stanzas included; dnf - sections of C(yum.repos.d/*.repo) with that base
    URL or the caller's repository id) and removes it, whatever key it trusts, so that the
    caller's pinned entry is the only one. Other entries in the same file are kept; a file left
    with no entry is removed (never C(sources.list) itself).
  - Disabled entries (commented-out lines, C(Enabled - no), C(enabled=0)) are left as they are,
    except a dnf section with the caller's repository id, which dnf could read instead of the
    caller's.
  - An entry for the repository in the caller's own file that does not trust the caller's keyring
    (a vendor's file at the same path, such as Docker's C(docker.list) or the toolkit's
    C(nvidia-container-toolkit.list)) is left for the caller to rewrite, and named too.
  - Returns one message per file, naming it and the key it trusted.
options:
  format:
    description: Which package manager's configuration to read.
    type: str
    required: true
    choices: [apt, dnf]
  url:
    description: The repository's URI (apt) or base URL (dnf), as the caller's own entry has it.
    type: str
    required: true
  own_file:
    description: The caller's own sources or .repo file, whose entry is the pinned one.
    type: path
    required: true
  repo_id:
    description: dnf - the caller's repository id (its section in own_file).
    type: str
    default: ""
  keyring:
    description:
      - The keyring the caller's entry trusts (apt signed-by, dnf gpgkey as a file URL); an entry in
        own_file that trusts another is a vendor's the caller is about to rewrite.
    type: str
    default: ""
  substitutions:
    description:
      - Variables expanded in every URL before comparing (apt's C($(ARCH)), dnf's C($basearch),
        C($releasever)), as the package manager expands them.
    type: dict
    default: {}
  sources_list:
    description: apt's main sources file.
    type: path
    default: /etc/apt/sources.list
  sources_dir:
    description: apt's sources directory.
    type: path
    default: /etc/apt/sources.list.d
  repos_dir:
    description: dnf's repository directory.
    type: path
    default: /etc/yum.repos.d
author: tf-gpu-host
"""

RETURN = r"""
replaced:
  description: The files changed, each with whether it was removed and the entries taken out.
  type: list
  elements: dict
  returned: always
messages:
  description: One line per changed file, naming it, what it trusted and what replaces it.
  type: list
  elements: str
  returned: always
"""

DISABLED = ("no", "false", "0", "off")


def normalise(url: str, substitutions: dict[str, str]) -> str:
    """A URL as a comparison key: variables expanded; scheme (http = https), host case and
    trailing slashes do not matter."""
    for name in sorted(substitutions, key=len, reverse=True):
        url = url.replace(name, str(substitutions[name]))
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        scheme = "http(s)"
    path = re.sub("/+", "/", parts.path).rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{scheme}://{parts.netloc.lower()}{path}{query}"


@dataclass
class Change:
    """What happens to one file: its new text (None: removed) and what was taken out."""

    path: str
    text: str | None
    entries: list[str] = field(default_factory=list)
    trust: list[str] = field(default_factory=list)
    own: bool = False  # the caller's own file: the caller rewrites it, this module does not

    def message(self, own_file: str, kind: str, check_mode: bool = False) -> str:
        """One line for the play's output; in check mode it says what a real run would do."""
        trusted = ", ".join(dict.fromkeys(self.trust))
        entries = ", ".join(dict.fromkeys(self.entries))
        if check_mode:
            if self.own:
                return (f"Would replace {self.path} ({kind} {entries}; {trusted}): the role would "
                        "write its own entry there, which trusts only the pinned key.")
            if self.text is None:
                return (f"Would replace {self.path} ({kind} {entries}; {trusted}) with {own_file}, "
                        "which trusts only the pinned key, and remove the file, which holds "
                        "nothing else.")
            return (f"Would replace the {kind} {entries} in {self.path} ({trusted}) with "
                    f"{own_file}, which trusts only the pinned key; the file's other entries "
                    "would be kept.")
        if self.own:
            return (f"Replacing {self.path} ({kind} {entries}; {trusted}): the role writes its own "
                    "entry there, which trusts only the pinned key.")
        if self.text is None:
            return (f"Replaced {self.path} ({kind} {entries}; {trusted}) with {own_file}, which "
                    "trusts only the pinned key; removed the file, which held nothing else.")
        return (f"Replaced the {kind} {entries} in {self.path} ({trusted}) with {own_file}, which "
                f"trusts only the pinned key; the file's other entries are kept.")


# --- apt: one-line entries ---------------------------------------------------------------------


def one_line_entry(line: str) -> tuple[dict[str, str], str] | None:
    """(options, URI) of a `deb`/`deb-src` line (sources.list(5)), or None for anything else."""
    text = line.split("#", 1)[0].strip()
    tokens = text.split()
    if not tokens or tokens[0] not in ("deb", "deb-src"):
        return None
    rest = " ".join(tokens[1:])
    options: dict[str, str] = {}
    if rest.startswith("["):
        end = rest.find("]")
        if end < 0:
            return None
        for item in rest[1:end].split():
            key, _, value = item.partition("=")
            options[key.rstrip("+-").lower()] = value
        rest = rest[end + 1:]
    words = rest.split()
    return (options, words[0]) if words else None


def apt_trust(options: dict[str, str]) -> str:
    if options.get("trusted", "").lower() == "yes":
        return "trusted=yes, no signature check"
    if options.get("signed-by"):
        return f"signed-by {options['signed-by']}"
    return "any key in apt's trusted.gpg.d"


def own_list(path: str, text: str, target: str, substitutions: dict[str, str],
             keyring: str) -> Change | None:
    """The caller's own file, when it holds an entry for the repository that is not the caller's."""
    change = Change(path, text, own=True)
    for line in text.splitlines():
        entry = one_line_entry(line)
        if (entry and normalise(entry[1], substitutions) == target
                and entry[0].get("signed-by") != keyring):
            change.entries.append(entry[1])
            change.trust.append(apt_trust(entry[0]))
    return change if change.entries else None


def plan_list(path: str, text: str, target: str, substitutions: dict[str, str],
              keep_file: bool) -> Change | None:
    """Drop the lines of a one-line-format file whose URI is the managed one."""
    lines = text.splitlines(keepends=True)
    change = Change(path, None)
    kept: list[str] = []
    for line in lines:
        entry = one_line_entry(line)
        if entry and normalise(entry[1], substitutions) == target:
            change.entries.append(entry[1])
            change.trust.append(apt_trust(entry[0]))
        else:
            kept.append(line)
    if not change.entries:
        return None
    if keep_file or any(one_line_entry(line) for line in kept):
        change.text = "".join(kept)
    return change


# --- apt: deb822 stanzas -----------------------------------------------------------------------


@dataclass
class Stanza:
    """A deb822 paragraph: its line span and fields (lower-case name -> value, lines, name)."""

    start: int
    end: int
    fields: dict[str, tuple[str, int, int, str]] = field(default_factory=dict)

    def value(self, name: str) -> str:
        return self.fields.get(name, ("", 0, 0, ""))[0]


def stanzas(lines: list[str]) -> list[Stanza]:
    """The paragraphs of a .sources file; comments (#) inside one belong to it."""
    found: list[Stanza] = []
    current: Stanza | None = None
    last: str | None = None
    for index, line in enumerate(lines):
        if not line.strip():
            current, last = None, None
            continue
        if line.startswith("#"):
            if current is not None:
                current.end = index
            continue
        if line[0] in " \t":
            if current is not None and last is not None:
                value, first, _, name = current.fields[last]
                more = line.strip()
                current.fields[last] = (f"{value}\n{'' if more == '.' else more}".strip(),
                                        first, index, name)
                current.end = index
            continue
        name, separator, value = line.partition(":")
        if current is None:
            current = Stanza(index, index)
            found.append(current)
        current.end = index
        if separator:
            last = name.strip().lower()
            current.fields[last] = (value.strip(), index, index, name.strip())
    return found


def sources_trust(stanza: Stanza) -> str:
    if stanza.value("trusted").lower() == "yes":
        return "trusted: yes, no signature check"
    signed_by = stanza.value("signed-by")
    if not signed_by:
        return "any key in apt's trusted.gpg.d"
    if "BEGIN PGP" in signed_by:
        return "a key embedded in Signed-By"
    return f"Signed-By {' '.join(signed_by.split())}"


def plan_sources(path: str, text: str, target: str,
                 substitutions: dict[str, str]) -> Change | None:
    """Drop the managed URI from every enabled stanza; a stanza left with no URI goes."""
    lines = text.splitlines(keepends=True)
    change = Change(path, None)
    replace: dict[int, str | None] = {}  # line index -> new line (None: drop)
    for stanza in stanzas(lines):
        if stanza.value("enabled").lower() in DISABLED:
            continue
        uris = stanza.value("uris").split()
        matching = [uri for uri in uris if normalise(uri, substitutions) == target]
        if not matching:
            continue
        change.entries += matching
        change.trust.append(sources_trust(stanza))
        remaining = [uri for uri in uris if uri not in matching]
        _, first, last, name = stanza.fields["uris"]
        if remaining:
            newline = "\n" if lines[first].endswith("\n") else ""
            replace[first] = f"{name}: {' '.join(remaining)}{newline}"
            replace.update({index: None for index in range(first + 1, last + 1)})
        else:
            replace.update({index: None for index in range(stanza.start, stanza.end + 1)})
    if not change.entries:
        return None
    kept = [replace.get(index, line) for index, line in enumerate(lines)]
    new_lines = [line for line in kept if line is not None]
    if any(stanza.fields for stanza in stanzas(new_lines)):
        change.text = re.sub(r"\n{3,}", "\n\n", "".join(new_lines)).lstrip("\n")
    return change


# --- dnf: .repo sections -----------------------------------------------------------------------


@dataclass
class Section:
    """An INI section of a .repo file: its id, line span and options."""

    name: str
    start: int
    end: int
    options: dict[str, str] = field(default_factory=dict)


def sections(lines: list[str]) -> list[Section]:
    found: list[Section] = []
    current: Section | None = None
    last: str | None = None
    for index, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            current, last = Section(stripped[1:-1].strip(), index, index), None
            found.append(current)
            continue
        if current is None or not stripped or stripped.startswith(("#", ";")):
            continue
        current.end = index
        if line[0] in " \t" and last is not None:
            current.options[last] += " " + stripped
            continue
        key, separator, value = line.partition("=")
        if separator:
            last = key.strip().lower()
            current.options[last] = value.strip()
    return found


def dnf_trust(section: Section) -> str:
    checks = [section.options.get(name, "0").lower() not in DISABLED
              for name in ("gpgcheck", "repo_gpgcheck")]
    if not any(checks):
        return "no signature check"
    gpgkey = " ".join(section.options.get("gpgkey", "").split())
    return f"gpgkey {gpgkey}" if gpgkey else "no gpgkey"


def plan_repo(path: str, text: str, target: str, substitutions: dict[str, str], own_file: str,
              repo_id: str, keyring: str) -> list[Change]:
    """Drop every section with the managed base URL (enabled) or the caller's repository id."""
    lines = text.splitlines(keepends=True)
    change = Change(path, None)
    changes: list[Change] = []
    drop: set[int] = set()
    found = sections(lines)
    for section in found:
        same_id = bool(repo_id) and section.name == repo_id
        if same_id and path == own_file:
            gpgkey = section.options.get("gpgkey", "").split()
            if keyring and gpgkey != [f"file://{keyring}"]:
                changes.append(Change(path, text, [f"[{section.name}]"], [dnf_trust(section)],
                                      own=True))
            continue
        urls = re.split(r"[\s,]+", section.options.get("baseurl", "").strip())
        same_url = any(normalise(url, substitutions) == target for url in urls if url)
        enabled = section.options.get("enabled", "1").lower() not in DISABLED
        if same_id or (same_url and enabled):
            change.entries.append(f"[{section.name}]")
            change.trust.append(dnf_trust(section))
            drop.update(range(section.start, section.end + 1))
    if not change.entries:
        return changes
    if len(change.entries) < len(found):
        kept = "".join(line for index, line in enumerate(lines) if index not in drop)
        change.text = re.sub(r"\n{3,}", "\n\n", kept)
    return [*changes, change]


# --- The plan for a whole host, and the module -------------------------------------------------


def plan(kind: str, url: str, own_file: str, repo_id: str, substitutions: dict[str, str],
         files: dict[str, str], main_list: str = "/etc/apt/sources.list",
         keyring: str = "") -> list[Change]:
    """The changes that leave the caller's entry the only enabled one for `url`.

    Changes marked `own` are the caller's to make (its template or yum_repository rewrites
    its own file); they are returned so that the file is named.
    """
    target = normalise(url, substitutions)
    changes: list[Change] = []
    for path, text in files.items():
        change: Change | None = None
        if kind == "dnf":
            changes += plan_repo(path, text, target, substitutions, own_file, repo_id, keyring)
            continue
        if path == own_file:
            change = own_list(path, text, target, substitutions, keyring) if keyring else None
        elif path.endswith(".sources"):
            change = plan_sources(path, text, target, substitutions)
        else:
            change = plan_list(path, text, target, substitutions, keep_file=path == main_list)
        if change is not None:
            changes.append(change)
    return changes


def read_files(module: AnsibleModule) -> dict[str, str]:
    params = module.params
    if params["format"] == "dnf":
        paths = sorted(glob.glob(os.path.join(params["repos_dir"], "*.repo")))
    else:
        paths = [params["sources_list"]] if os.path.isfile(params["sources_list"]) else []
        paths += sorted(glob.glob(os.path.join(params["sources_dir"], "*.list"))
                        + glob.glob(os.path.join(params["sources_dir"], "*.sources")))
    files: dict[str, str] = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="surrogateescape") as handle:
            files[path] = handle.read()
    return files


def apply(module: AnsibleModule, change: Change) -> None:
    if change.text is None:
        os.unlink(change.path)
        return
    # Written beside the file under a name neither apt nor dnf reads, then moved over it
    # (atomic_move keeps the file's owner and mode).
    descriptor, temporary = tempfile.mkstemp(prefix=".repo_trust-", suffix=".tmp",
                                             dir=os.path.dirname(change.path))
    with os.fdopen(descriptor, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(change.text)
    module.atomic_move(temporary, change.path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "format": {"type": "str", "required": True, "choices": ["apt", "dnf"]},
            "url": {"type": "str", "required": True},
            "own_file": {"type": "path", "required": True},
            "repo_id": {"type": "str", "default": ""},
            "keyring": {"type": "str", "default": ""},
            "substitutions": {"type": "dict", "default": {}},
            "sources_list": {"type": "path", "default": "/etc/apt/sources.list"},
            "sources_dir": {"type": "path", "default": "/etc/apt/sources.list.d"},
            "repos_dir": {"type": "path", "default": "/etc/yum.repos.d"},
        },
        supports_check_mode=True,
    )
    params = module.params
    changes = plan(params["format"], params["url"], params["own_file"], params["repo_id"],
                   {str(key): str(value) for key, value in params["substitutions"].items()},
                   read_files(module), params["sources_list"], params["keyring"])
    kind = "repository" if params["format"] == "dnf" else "entry for"
    ours = [change for change in changes if not change.own]
    if not module.check_mode:
        for change in ours:
            apply(module, change)
    module.exit_json(
        changed=bool(ours),
        replaced=[{"path": change.path, "removed": change.text is None,
                   "entries": change.entries} for change in ours],
        messages=[change.message(params["own_file"], kind, module.check_mode)
                  for change in changes],
    )


if __name__ == "__main__":
    main()
