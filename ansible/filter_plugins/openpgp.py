"""Ansible filter: the pinned OpenPGP key, as GnuPG exports it clean, and nothing else.

Why a keyring made here and not the fetched file: apt's `signed-by` keyring and
`rpm --import` read *everything* in the file they are given. A mirror that adds
its own key, user ID or subkey to the vendor's file, or pads it with copies of
its signatures, would otherwise have all of that installed and trusted.

Why GnuPG: it is the OpenPGP implementation apt's `gpgv` and the vendors' own
instructions (`gpg --dearmor`) come from, it is in every distribution, and it
has done exactly this job for decades: `--import-options
import-minimal,import-clean` keeps a key's user IDs and subkeys that carry a
self-signature that verifies, the most recent self-signature per user ID and
binding per subkey, and drops other keys' certifications and every packet that
does not belong. `--export-options export-minimal` then writes that key with
canonical packet headers. Sequoia (`sq`) would do as well but is not installed
on the usual controller, and its certificate merge also keeps unhashed
subpackets. The import runs with `no-repair-keys`: GnuPG's default repair
removes duplicate signatures before checking them, judging copies equal on
their signature values alone, and keeps the last copy read, so a mirror could
choose which copy is checked; a copy it made invalid (a subpacket of unknown
type marked critical in the unhashed area) would then take the vendor's user
ID or subkey out with it. Without the repair every copy is checked on its own.

What GnuPG cannot do, and so this file still does (`_strip_unhashed`): a
signature's unhashed area is not covered by the signature, and GnuPG keeps it
as it was read. Of valid copies of a signature it keeps one (of a revocation
or a direct-key signature, every one), but that one may be a mirror's copy
padded with a notation. So each signature of the export keeps, of its unhashed
area, only its first issuer key ID, its first issuer fingerprint and (on a
subkey binding) its first embedded back signature, itself reduced to its
issuer fields, re-encoded in that order with the shortest lengths; copies that are then
the same packet are kept once. The result is imported into a second fresh
GnuPG home and exported again, and must come back packet for packet. So the
installed keyring is byte for byte what GnuPG exports from the vendor's clean
file, whatever was added around it.

Where it runs: on the Ansible controller, which therefore needs `gpg` (GnuPG
2.2 or later) in its PATH; a missing gpg is one line naming the fix. The check
then runs before anything reaches the host, also under --check, with one
GnuPG version whatever the target runs. Each run uses its own temporary GnuPG
home (mode 0700) that is removed afterwards; gpg runs with --no-autostart (no
agent, no keyboxd, no dirmngr: it never reaches a keyserver), with a deadline.

    {{ fetched.content_base64 | openpgp_pinned_keyring(fingerprint, encoding='base64') }}
    -> {"ok": true, "keyring": "-----BEGIN PGP PUBLIC KEY BLOCK-----\n...", "problem": "",
        "wrong_key": false, "found": ["EB69..."], "notes": [], "summary": "1 user ID, ...",
        "controller_problem": ""}
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from ansible.errors import AnsibleFilterError

INPUT_MAX_BYTES = 1 << 20  # a vendor's key file is a few kB; keyserver copies with many
# third-party signatures reach a few hundred kB
# gpg's address space: a vendor's key needs under 10 MiB; a compressed packet of 200 kB
# that inflates to many user IDs took 427 MiB (and the whole deadline) without this cap.
GPG_MEMORY_MAX = 256 << 20
GPG_DEADLINE_S = 60.0  # all gpg runs of one call together; 1 MiB of keys takes gpg ~20 s
LINE_MAX = 200  # every problem, note and summary: one line of at most this many characters
FOUND_MAX = 10  # primary fingerprints kept in `found`
GPG_OPTIONS = ("--batch", "--no-tty", "--no-autostart", "--no-greeting", "--quiet",
               "--no-permission-warning")
# no-repair-keys: GnuPG's duplicate removal (on by default) would let a mirror choose which
# copy of a signature GnuPG checks, and keep one it made invalid (the module's docstring).
IMPORT = ("--import-options", "import-minimal,import-clean,no-repair-keys", "--import")
EXPORT = ("--export-options", "export-minimal", "--export")
MISSING_GPG = ("GnuPG's gpg is not installed on the Ansible controller (the key check runs "
               "there); install it: apt install gpg, dnf install gnupg2 or brew install gnupg")

SIGNATURE = 2
ISSUER_KEY_ID, EMBEDDED_SIGNATURE, ISSUER_FINGERPRINT = 16, 32, 33
SUBKEY_BINDING = 0x18


class Refused(Exception):
    """The key file is not the pinned key; `reason` is the one-line why."""

    def __init__(self, reason: str, found: list[str] | None = None, wrong_key: bool = False):
        super().__init__(reason)
        self.reason = line(reason)
        self.found = (found or [])[:FOUND_MAX]
        self.wrong_key = wrong_key


class ControllerProblem(Exception):
    """gpg could not be run on the controller: not the key file's fault."""


def line(text: str, limit: int = LINE_MAX) -> str:
    """One printable line of at most `limit` characters (gpg's words may quote the file)."""
    shown = " ".join("".join(char if char.isprintable() else "?" for char in part)
                     for part in text.split())
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


# --- GnuPG in a throwaway home --------------------------------------------------------------


def _limit_memory() -> None:
    """In the gpg child: cap its address space (a controller that cannot set it runs on)."""
    with suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (GPG_MEMORY_MAX, GPG_MEMORY_MAX))


class Gpg:
    """gpg with its own temporary home; every run shares one deadline and a memory cap."""

    def __init__(self, home: str, deadline: float) -> None:
        self.home = home
        self.deadline = deadline

    def run(self, *args: str, data: bytes = b"") -> subprocess.CompletedProcess[bytes]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise Refused(f"took GnuPG more than {GPG_DEADLINE_S:.0f} s to read (a vendor's "
                          "key file takes well under a second)")
        environment = {"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C",
                       "GNUPGHOME": self.home}
        try:
            result = subprocess.run(["gpg", "--homedir", self.home, *GPG_OPTIONS, *args],
                                    input=data, capture_output=True, env=environment,
                                    timeout=left, check=False, preexec_fn=_limit_memory)
        except subprocess.TimeoutExpired as exc:
            raise Refused(f"took GnuPG more than {GPG_DEADLINE_S:.0f} s to read (a vendor's "
                          "key file takes well under a second)") from exc
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise ControllerProblem(MISSING_GPG) from exc
            raise ControllerProblem(line(f"gpg could not be run on the Ansible controller "
                                         f"({exc.strerror or exc})")) from exc
        if b"out of core" in result.stderr or result.returncode < 0:  # < 0: its signal
            raise Refused(f"needs more than {GPG_MEMORY_MAX >> 20} MiB for GnuPG to read (a "
                          "vendor's key needs under 10 MiB; a compressed packet that inflates "
                          "to many packets does this)")
        return result


@contextmanager
def gnupg_home(deadline: float) -> Iterator[Gpg]:
    """A fresh GnuPG home (mkdtemp: mode 0700), its daemons stopped and it removed after.

    The directory exists before gpg first runs, so GnuPG 2.4 writes no common.conf
    with use-keyboxd into it; --no-autostart starts no agent either. The kill is there
    for any daemon a gpg build starts regardless.
    """
    home = tempfile.mkdtemp(prefix="repo-trust-gnupg-")
    try:
        yield Gpg(home, deadline)
    finally:
        # Nothing was started (--no-autostart), or gpgconf is missing: nothing to stop.
        with suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run(["gpgconf", "--homedir", home, "--kill", "all"], capture_output=True,
                           env={"PATH": os.environ.get("PATH", os.defpath), "LC_ALL": "C"},
                           timeout=10, check=False)
        shutil.rmtree(home, ignore_errors=True)


def _gpg_said(result: subprocess.CompletedProcess[bytes]) -> str:
    """gpg's first complaint, quoted as one short line (it may quote the file's text)."""
    for text in result.stderr.decode("utf-8", "replace").splitlines():
        text = text.removeprefix("gpg: ").strip()
        if text and "processed so far" not in text:
            return line(text, 80)
    return f"exit status {result.returncode}"


def _primary_keys(gpg: Gpg, data: bytes) -> list[tuple[str, str]]:
    """(record type, fingerprint) of every primary key in the file, as gpg reads it, in
    order; nothing is imported (show-only). 'sec' marks secret key material."""
    result = gpg.run("--with-colons", "--import-options", "show-only", "--import", data=data)
    keys: list[tuple[str, str]] = []
    want: str | None = None
    for record in result.stdout.decode("utf-8", "replace").splitlines():
        fields = record.split(":")
        if fields[0] in ("pub", "sec"):
            want = fields[0]
        elif fields[0] in ("sub", "ssb", "uid", "uat"):
            want = None
        elif fields[0] == "fpr" and want is not None and len(fields) > 9:
            keys.append((want, fields[9].upper()))
            want = None
    if not keys:
        raise Refused(f"holds no OpenPGP public key that GnuPG can read (gpg: "
                      f"{_gpg_said(result)})")
    return keys


def _listing(gpg: Gpg, fingerprint: str) -> tuple[int, int]:
    """(user IDs, subkeys) of the imported key, from gpg's --with-colons listing."""
    result = gpg.run("--with-colons", "--list-keys", fingerprint)
    records = [record.split(":", 1)[0] for record in
               result.stdout.decode("utf-8", "replace").splitlines()]
    return records.count("uid") + records.count("uat"), records.count("sub")


def _import(gpg: Gpg, data: bytes) -> subprocess.CompletedProcess[bytes]:
    """Import `data` minimal and clean: what GnuPG keeps of it is valid and not repeated."""
    return gpg.run(*IMPORT, data=data)


def _export(gpg: Gpg, fingerprint: str, imported: subprocess.CompletedProcess[bytes],
            armor: bool = False) -> bytes:
    """The key `fingerprint` as GnuPG exports it minimal; refused when it imported none."""
    exported = gpg.run(*(("--armor",) if armor else ()), *EXPORT, fingerprint).stdout
    if not exported:
        raise Refused(f"holds the pinned key {fingerprint}, but GnuPG imports none of it "
                      f"(gpg: {_gpg_said(imported)})")
    return exported


# --- What GnuPG cannot do: leave out a signature's unhashed additions ---------------------


class _Unreadable(Exception):
    """GnuPG's own export did not split into packets (never seen; refused if it happens)."""


def packets(data: bytes) -> list[tuple[int, bytes]]:
    """(tag, body) of each packet of GnuPG's export (RFC 4880 section 4.2 headers; gpg
    writes definite lengths only)."""
    found: list[tuple[int, bytes]] = []
    position = 0
    try:
        while position < len(data):
            header = data[position]
            if not header & 0x80:
                raise _Unreadable
            if header & 0x40:  # new format
                tag, first = header & 0x3F, data[position + 1]
                if first < 192:
                    length, start = first, position + 2
                elif first < 224:
                    length = ((first - 192) << 8) + data[position + 2] + 192
                    start = position + 3
                elif first == 255:
                    length = int.from_bytes(data[position + 2:position + 6], "big")
                    start = position + 6
                else:
                    raise _Unreadable  # partial lengths: never in a key
            else:  # old format
                tag, size = (header >> 2) & 0x0F, 1 << (header & 0x03)
                if header & 0x03 == 3:
                    raise _Unreadable
                length = int.from_bytes(data[position + 1:position + 1 + size], "big")
                start = position + 1 + size
            if start + length > len(data):
                raise _Unreadable
            found.append((tag, data[start:start + length]))
            position = start + length
    except IndexError as exc:
        raise _Unreadable from exc
    return found


def _subpacket(kind: int, content: bytes) -> bytes:
    """One subpacket, its length in the shortest form (RFC 4880 section 5.2.3.1)."""
    size = len(content) + 1
    if size < 192:
        length = bytes([size])
    elif size < 8384:
        length = bytes([((size - 192) >> 8) + 192, (size - 192) & 0xFF])
    else:
        length = b"\xff" + size.to_bytes(4, "big")
    return length + bytes([kind]) + content


def _strip_unhashed(body: bytes, dropped: list[int]) -> bytes:
    """A v4 signature with only its issuer fields and a binding's back signature left in its
    unhashed area; other versions as they are. Counts what it leaves out in `dropped`."""
    return _reduced(body, dropped, back_signature=len(body) > 1 and body[1] == SUBKEY_BINDING)


def _reduced(body: bytes, dropped: list[int], back_signature: bool) -> bytes:
    """`body` with its issuer fields, and its first embedded signature if `back_signature`,
    left in its unhashed area. A back signature is itself reduced to its issuer fields: it
    holds no signature of its own (one level, whatever type its bytes claim)."""
    if len(body) < 6 or body[0] != 4:
        return body
    start = 6 + int.from_bytes(body[4:6], "big")
    if start + 2 > len(body):
        raise _Unreadable
    end = start + 2 + int.from_bytes(body[start:start + 2], "big")
    area, position = body[start + 2:end], 0
    wanted = {ISSUER_KEY_ID, ISSUER_FINGERPRINT}
    if back_signature:
        wanted.add(EMBEDDED_SIGNATURE)
    kept: dict[int, bytes] = {}
    while position < len(area):
        first = area[position]
        if first < 192:
            size, position = first, position + 1
        elif first < 255:
            size = ((first - 192) << 8) + area[position + 1] + 192
            position += 2
        else:
            size = int.from_bytes(area[position + 1:position + 5], "big")
            position += 5
        if size == 0 or position + size > len(area):
            raise _Unreadable
        kind, content = area[position] & 0x7F, area[position + 1:position + size]
        position += size
        if kind not in wanted or kind in kept:
            dropped.append(kind)
            continue
        if kind == EMBEDDED_SIGNATURE:
            content = _reduced(content, dropped, back_signature=False)
        kept[kind] = _subpacket(area[position - size], content)
    rebuilt = b"".join(kept[kind] for kind in (ISSUER_KEY_ID, ISSUER_FINGERPRINT,
                                               EMBEDDED_SIGNATURE) if kind in kept)
    return body[:start] + len(rebuilt).to_bytes(2, "big") + rebuilt + body[end:]


def _without_unhashed_additions(export: bytes) -> tuple[list[tuple[int, bytes]], int]:
    """GnuPG's export with every signature's unhashed area reduced, each signature once under
    its key, user ID or subkey; how many subpackets were left out."""
    dropped: list[int] = []
    try:
        reduced = [(tag, _strip_unhashed(body, dropped) if tag == SIGNATURE else body)
                   for tag, body in packets(export)]
    except (_Unreadable, IndexError) as exc:
        raise Refused("gave a key that GnuPG exported in a form this check cannot split "
                      "into packets") from exc
    # Copies that differed only in their unhashed areas are the same packet now. GnuPG keeps
    # one self-signature per user ID and one binding per subkey itself; valid copies of a
    # revocation or a direct-key signature it keeps all (no-repair-keys), so one is kept here.
    kept: list[tuple[int, bytes]] = []
    seen: set[bytes] = set()
    for tag, body in reduced:
        if tag != SIGNATURE:
            seen.clear()
        elif body in seen:
            continue
        else:
            seen.add(body)
        kept.append((tag, body))
    return kept, len(dropped)


def _packet(tag: int, body: bytes) -> bytes:
    """A new-format packet with a five-byte length; GnuPG re-encodes it as it writes keys."""
    return bytes([0xC0 | tag, 0xFF]) + len(body).to_bytes(4, "big") + body


# --- The filter -------------------------------------------------------------------------------


def _input_bytes(key: str | bytes) -> bytes:
    """The file's bytes. Text that came through Ansible's to_text() keeps undecodable bytes
    as surrogates; surrogateescape gives those bytes back."""
    try:
        data = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)
    except UnicodeEncodeError as exc:
        raise Refused("is neither armored text nor binary OpenPGP data") from exc
    if not data.strip():
        raise Refused("is empty")
    return data


def pinned_keyring(key: str | bytes, pinned: str) -> tuple[str, list[str], str, list[str]]:
    """(armored keyring, primary fingerprints found, summary, notes); raises Refused."""
    if len(key) > INPUT_MAX_BYTES:
        raise Refused(f"is {len(key)} bytes, more than the {INPUT_MAX_BYTES} a key file is "
                      "given (a vendor's key: a few kB)")
    data = _input_bytes(key)
    if len(data) > INPUT_MAX_BYTES:  # the characters of text were counted above, not bytes
        raise Refused(f"is {len(data)} bytes, more than the {INPUT_MAX_BYTES} a key file is "
                      "given (a vendor's key: a few kB)")
    deadline = time.monotonic() + GPG_DEADLINE_S
    with gnupg_home(deadline) as gpg:
        keys = _primary_keys(gpg, data)
        found = list(dict.fromkeys(fingerprint for _, fingerprint in keys))
        if any(kind == "sec" for kind, _ in keys):
            raise Refused("holds secret key material (a private key block), which a "
                          "repository's key file never does", found=found)
        if pinned not in found:
            shown = ", ".join(found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3
                                            else "")
            raise Refused(f"has fingerprint {shown}", found=found, wrong_key=True)
        if len(found) > 1:
            others = [other for other in found if other != pinned]
            shown = ", ".join(others[:2]) + (f" and {len(others) - 2} more" if len(others) > 2
                                             else "")
            raise Refused(f"holds the pinned key {pinned} and also {shown}; a vendor's file "
                          "holds one key", found=found)
        export = _export(gpg, pinned, _import(gpg, data))
    stripped, dropped = _without_unhashed_additions(export)
    with gnupg_home(deadline) as gpg:
        imported = _import(gpg, b"".join(_packet(tag, body) for tag, body in stripped))
        final = _export(gpg, pinned, imported)
        armored = _export(gpg, pinned, imported, armor=True)
        user_ids, subkeys = _listing(gpg, pinned)
    try:
        same = packets(final) == stripped
    except _Unreadable:
        same = False
    if not same:
        raise Refused("gave a key that GnuPG did not read back unchanged once the unhashed "
                      "additions to its signatures were left out")
    summary = (f"{user_ids} user ID{'s' * (user_ids != 1)}, {subkeys} subkey"
               f"{'s' * (subkeys != 1)}, {len(final)} bytes, from a {len(data)}-byte file")
    notes = [f"left out {dropped} unhashed subpacket(s) that no signature covers"] if dropped \
        else []
    return armored.decode("ascii"), found, line(summary), notes


def openpgp_pinned_keyring(key: Any, fingerprint: Any, encoding: str = "text") -> dict[str, Any]:
    """The filter: a result dict; `problem` (the key file's) or `controller_problem` (gpg's
    on the controller) is the one-line reason when `ok` is false.

    encoding="base64": `key` is the file's bytes base64-encoded (repo_trust_fetch's
    content_base64), so that a binary file reaches the filter byte for byte.
    """
    pinned = str(fingerprint).replace(" ", "").upper()
    if not re.fullmatch(r"[0-9A-F]{40}", pinned):
        raise AnsibleFilterError(line(
            f"openpgp_pinned_keyring: the pinned fingerprint {str(fingerprint)[:60]!r} is not "
            "40 hex digits (a version 4 key's full fingerprint)"))
    if not isinstance(key, str | bytes):
        raise AnsibleFilterError("openpgp_pinned_keyring expects the key file's content")
    if encoding == "base64":
        try:
            key = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise AnsibleFilterError(
                "openpgp_pinned_keyring: the content is not base64") from exc
    elif encoding != "text":
        raise AnsibleFilterError(line(f"openpgp_pinned_keyring: unknown encoding "
                                      f"{str(encoding)[:40]!r}"))
    result: dict[str, Any] = {"ok": False, "keyring": "", "problem": "", "wrong_key": False,
                              "found": [], "notes": [], "summary": "", "controller_problem": ""}
    try:
        keyring, found, summary, notes = pinned_keyring(key, pinned)
    except Refused as refusal:
        return {**result, "problem": refusal.reason, "wrong_key": refusal.wrong_key,
                "found": refusal.found}
    except ControllerProblem as problem:
        return {**result, "controller_problem": line(str(problem))}
    return {**result, "ok": True, "keyring": keyring, "found": found, "summary": summary,
            "notes": notes}


class FilterModule:
    """Registers the filter with Ansible."""

    def filters(self) -> dict[str, Any]:
        return {"openpgp_pinned_keyring": openpgp_pinned_keyring}
