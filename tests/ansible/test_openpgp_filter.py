"""The key filter installs GnuPG's clean export of the pinned key, or refuses in one line.

repo_trust installs what `openpgp_pinned_keyring` returns, never the fetched file, so the
filter is the whole defence against a mirror that serves the vendor's key plus something
of its own. The families below are what such a mirror controls: concatenated keys
(armored and binary), text around the block, user IDs and subkeys added by packet
surgery, another key's certifications, and random corruption. The keys are made once per
module by the real gpg (Ed25519 with a signing and an encryption subkey, RSA, ECDSA); the
vendors' own published keys are checked too (tests/fixtures/vendor_keys). What is
installed is compared with `clean_export`: plain gpg, none of the filter's code.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_plugin
from tests.ansible.openpgp_keys import (
    USER_ID,
    Gpg,
    armor,
    clean_export,
    dearmor,
    header,
    join,
    nothing_added,
    split,
)
from tests.ansible.playbook import ANSIBLE_DIR, run_local_play
from tests.fixtures.vendor_keys import VENDOR_KEYS
from tests.support.loopback_http import serve_directory

openpgp = load_plugin("openpgp.py")
VENDOR_UID = "vendor signing key <vendor@example.invalid>"
LINE_MAX = 200


def pinned_keyring(key: str | bytes, fingerprint: str) -> dict[str, Any]:
    result: dict[str, Any] = openpgp.FilterModule().filters()["openpgp_pinned_keyring"](
        key, fingerprint)
    for text in [result["problem"], result.get("summary", ""), result.get("controller_problem", ""),
                 *result["notes"]]:
        assert len(text) <= LINE_MAX and text.isprintable(), repr(text[:300])
    return result


def assert_refused(result: dict[str, Any]) -> str:
    """A refusal is one non-empty line, and nothing to install comes with it."""
    assert not result["ok"], "accepted an input that is not exactly the pinned key"
    problem: str = result["problem"]
    assert problem and result["keyring"] == "" and not result["controller_problem"]
    return problem


def installed(result: dict[str, Any]) -> bytes:
    assert result["ok"], result["problem"] or result["controller_problem"]
    return dearmor(result["keyring"])


def listed(binary: bytes) -> list[str]:
    """The record types gpg lists for a keyring (pub, uid, sub, ...)."""
    with tempfile.TemporaryDirectory(prefix="openpgp-list-") as home:
        listing = subprocess.run(["gpg", "--homedir", home, "--batch", "--no-autostart",
                                  "--with-colons", "--show-keys"], input=binary,
                                 capture_output=True, check=True)
    return [line.split(":")[0] for line in listing.stdout.decode().splitlines()
            if line.split(":")[0] in ("pub", "uid", "sub")]


# --- Keys made by gpg, once per module --------------------------------------------------


@dataclass(frozen=True)
class Keys:
    """The pinned key (a vendor's: Ed25519 with an encryption and a signing subkey) and others."""

    pinned: str
    armored: str
    binary: bytes
    two_user_ids: bytes  # the pinned key with a second, self-certified user ID
    certified: bytes  # ... and the mirror's certification on both user IDs
    secret: str
    other: str  # the mirror's own key, with a subkey
    other_armored: str
    other_binary: bytes
    rsa: str
    rsa_armored: str
    rsa_binary: bytes
    signed_data: bytes
    signature: bytes  # by the pinned key's signing subkey


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keys]:
    gpg = Gpg(tmp_path_factory.mktemp("openpgp") / "gnupg")
    try:
        pinned = gpg.generate(VENDOR_UID, "ed25519")
        gpg.run("--quick-add-key", pinned, "cv25519", "encr", "never")
        gpg.run("--quick-add-key", pinned, "ed25519", "sign", "never")
        armored = gpg.export(pinned, "--armor").decode()
        binary = gpg.export(pinned)
        secret = gpg.run("--armor", "--export-secret-keys", pinned).decode()
        data = b"Release file of the stub repository\n"
        signature = gpg.run("--local-user", pinned, "--detach-sign", data=data)
        other = gpg.generate("mirror's own key <mirror@example.invalid>", "ed25519")
        gpg.run("--quick-add-key", other, "cv25519", "encr", "never")
        rsa = gpg.generate("rsa vendor <rsa@example.invalid>", "rsa2048")
        gpg.run("--quick-add-uid", pinned, "second identity <second@example.invalid>")
        two_user_ids = gpg.export(pinned)
        gpg.run("--local-user", other, "--quick-sign-key", pinned)
        certified = gpg.export(pinned)
        yield Keys(pinned=pinned, armored=armored, binary=binary, two_user_ids=two_user_ids,
                   certified=certified, secret=secret, other=other,
                   other_armored=gpg.export(other, "--armor").decode(),
                   other_binary=gpg.export(other), rsa=rsa,
                   rsa_armored=gpg.export(rsa, "--armor").decode(),
                   rsa_binary=gpg.export(rsa), signed_data=data, signature=signature)
    finally:
        gpg.close()


# --- What is accepted, and what is installed ---------------------------------------------


@pytest.mark.parametrize("path", list(VENDOR_KEYS), ids=lambda path: path.name)
def test_the_vendors_published_keys_are_accepted_unchanged(path: Path) -> None:
    defaults, fingerprint = VENDOR_KEYS[path]
    assert fingerprint in (ANSIBLE_DIR / "roles" / defaults).read_text()
    text = path.read_text()
    result = pinned_keyring(text, fingerprint)
    assert result["found"] == [fingerprint]
    assert installed(result) == dearmor(text)
    assert result["summary"].endswith(f"bytes, from a {len(text)}-byte file")


def test_clean_exports_install_as_gpg_exports_them(keys: Keys) -> None:
    cases: list[tuple[str | bytes, str, bytes]] = [
        (keys.armored, keys.pinned, keys.binary),
        (keys.binary, keys.pinned, keys.binary),
        (keys.rsa_armored, keys.rsa, keys.rsa_binary),
        (keys.two_user_ids, keys.pinned, keys.two_user_ids),
    ]
    for key, fingerprint, binary in cases:
        result = pinned_keyring(key, fingerprint)
        assert result["found"] == [fingerprint]
        assert installed(result) == binary == clean_export(binary, fingerprint)
    assert pinned_keyring(keys.two_user_ids, keys.pinned)["summary"].startswith(
        "2 user IDs, 2 subkeys, ")


@pytest.mark.parametrize("algorithm", ["nistp256", "nistp384", "rsa3072"])
def test_other_algorithms(tmp_path: Path, algorithm: str) -> None:
    """ECDSA and larger RSA keys, with a subkey, as other vendors publish them; a subkey
    binding that no longer verifies leaves its subkey out."""
    gpg = Gpg(tmp_path / "gnupg")
    try:
        fingerprint = gpg.generate(f"{algorithm} vendor <v@example.invalid>", algorithm)
        gpg.run("--quick-add-key", fingerprint, algorithm, "encr", "never")
        binary = gpg.export(fingerprint)
    finally:
        gpg.close()
    assert installed(pinned_keyring(binary, fingerprint)) == binary
    primary, uid, certification, subkey, (tag, binding) = split(binary)
    tampered = bytearray(binding)
    tampered[-5] ^= 0x01  # inside the signature value
    result = pinned_keyring(join([primary, uid, certification, subkey, (tag, bytes(tampered))]),
                            fingerprint)
    assert installed(result) == join([primary, uid, certification])
    assert listed(installed(result)) == ["pub", "uid"]


def test_binary_read_through_ansibles_text_conversion_is_accepted(keys: Keys) -> None:
    """`uri` returns content as text with undecodable bytes kept as surrogates."""
    as_text = keys.binary.decode("utf-8", "surrogateescape")
    assert installed(pinned_keyring(as_text, keys.pinned)) == keys.binary


def test_a_key_file_fetched_as_repo_trust_fetches_it(keys: Keys, tmp_path: Path) -> None:
    """repo_trust_fetch, then the filter, in a local play: binary files arrive byte for byte.

    `uri` with return_content cannot carry a binary (non-UTF-8) file back to the
    controller at all (Ansible refuses to deserialize it), so a binary keyring served
    by a mirror would stop the play with Ansible's error instead of the filter's line.
    """
    served = tmp_path / "served"
    served.mkdir()
    files = {"one.gpg": keys.binary, "two.gpg": keys.binary + keys.other_binary,
             "one.asc": keys.armored.encode()}
    for name, data in files.items():
        (served / name).write_bytes(data)
    with serve_directory(served, tmp_path / "http.log") as base_url:
        tasks: list[dict[str, Any]] = [
            {"name": f"fetch {name}", "repo_trust_fetch": {"url": f"{base_url}/{name}"},
             "register": f"fetched_{index}"} for index, name in enumerate(files)]
        tasks.append({"name": "check", "ansible.builtin.debug": {"msg": [
            f"RESULT {name}: {{{{ (fetched_{index}.content_base64 | openpgp_pinned_keyring("
            f"'{keys.pinned}', encoding='base64')).problem or 'accepted' }}}}"
            for index, name in enumerate(files)]}})
        run = run_local_play(tmp_path, [{"hosts": "localhost", "gather_facts": False,
                                         "tasks": tasks}], env={"ANSIBLE_LIBRARY": str(
                                             ANSIBLE_DIR / "roles" / "repo_trust" / "library")})
    assert run.returncode == 0, run.explain()
    flat = " ".join(run.output.split())
    assert "RESULT one.gpg: accepted" in flat
    assert "RESULT one.asc: accepted" in flat
    assert f"RESULT two.gpg: holds the pinned key {keys.pinned} and also {keys.other};" in flat


def _role_play(base_url: str, pinned: str) -> list[dict[str, Any]]:
    """repo_trust's own tasks, one local host per case (its key file); the play stops at the
    key check, before any task that writes."""
    return [{"hosts": "all", "gather_facts": False, "tasks": [{
        "name": "Trust the stand-in repository", "ansible.builtin.include_role": {
            "name": "repo_trust"},
        "vars": {"repo_trust_name": "the stand-in repository",
                 "repo_trust_key_url": f"{base_url}/{{{{ key_file }}}}",
                 "repo_trust_key_fingerprint": pinned,
                 "repo_trust_key_path": "/nonexistent/keyring.asc",
                 "repo_trust_fingerprint_variable": "standin_fingerprint",
                 "repo_trust_repo_url": f"{base_url}/repo",
                 "repo_trust_repo_file": "/nonexistent/standin.list"}}]}]


def test_the_roles_messages_are_one_line_each(keys: Keys, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """repo_trust's key check: the wrong key, another key added, and no gpg on the controller,
    each stop the play with the filter's line in the role's message."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "other.asc").write_text(keys.other_armored)
    (served / "two.asc").write_text(keys.armored + keys.other_armored)
    cases = {"wrong": "other.asc", "added": "two.asc"}
    for folder in ("keys", "bare", "no-gpg"):
        (tmp_path / folder).mkdir()
    with serve_directory(served) as base_url:
        play = _role_play(base_url, keys.pinned)
        run = run_local_play(tmp_path / "keys", play, hosts={
            name: {"key_file": file} for name, file in cases.items()})
        bare = run_local_play(tmp_path / "bare", play, hosts={"bare": {"key_file": "other.asc"}},
                              search_path=str(tmp_path / "no-gpg"))
    assert run.returncode != 0
    flat = " ".join(run.output.split())
    assert (f"Refusing the stand-in repository: the key at {base_url}/other.asc has fingerprint "
            f"{keys.other}, but standin_fingerprint is '{keys.pinned}'.") in flat, run.explain()
    assert (f"the key file at {base_url}/two.asc holds the pinned key {keys.pinned} and also "
            f"{keys.other};") in flat, run.explain()
    assert bare.returncode != 0
    flat = " ".join(bare.output.split())
    assert ("Cannot check the key of the stand-in repository: GnuPG's gpg is not installed on "
            "the Ansible controller") in flat, bare.explain()


def test_no_gpg_on_the_controller_is_one_line(keys: Keys, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openpgp, "subprocess", NoGpg())  # this module's view only
    result = pinned_keyring(keys.armored, keys.pinned)
    assert not result["ok"] and result["keyring"] == "" and result["problem"] == ""
    assert result["controller_problem"] == openpgp.MISSING_GPG


def test_gpg_leaves_nothing_behind(keys: Keys, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Each call's GnuPG homes are removed and no gpg daemon runs for them afterwards.

    The homes are made in tmp_path through the filter's own view of tempfile: the process's
    tempfile.tempdir is every thread's (a background job's stub repository landed in it)."""
    homes: list[str] = []

    def mkdtemp(**options: Any) -> str:
        homes.append(tempfile.mkdtemp(dir=tmp_path, **options))
        return homes[-1]

    monkeypatch.setattr(openpgp, "tempfile", SimpleNamespace(mkdtemp=mkdtemp))
    assert pinned_keyring(keys.armored, keys.pinned)["ok"]
    assert not pinned_keyring(keys.armored + keys.other_armored, keys.pinned)["ok"]
    assert len(homes) >= 2, "each call makes its GnuPG home through tempfile.mkdtemp"
    assert list(tmp_path.iterdir()) == []
    for command in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = command.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue  # the process ended while we looked
        assert str(tmp_path) not in text, text


def test_the_deadline_refuses_in_one_line(keys: Keys, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openpgp, "GPG_DEADLINE_S", 0.0)
    assert "took GnuPG more than 0 s to read" in assert_refused(
        pinned_keyring(keys.armored, keys.pinned))


def test_the_installed_keyring_is_the_pinned_key_to_gpg_and_gpgv(keys: Keys,
                                                                 tmp_path: Path) -> None:
    """gpg sees one primary key (the pinned one) and its subkeys; gpgv verifies with it."""
    keyring = installed(pinned_keyring(keys.armored, keys.pinned))
    assert listed(keyring) == ["pub", "uid", "sub", "sub"]
    (tmp_path / "pinned.gpg").write_bytes(keyring)
    (tmp_path / "Release").write_bytes(keys.signed_data)
    (tmp_path / "Release.gpg").write_bytes(keys.signature)
    verified = subprocess.run(["gpgv", "--keyring", str(tmp_path / "pinned.gpg"),
                               str(tmp_path / "Release.gpg"), str(tmp_path / "Release")],
                              capture_output=True, text=True, check=False)
    assert verified.returncode == 0, verified.stderr


def test_a_third_party_certification_is_left_out(keys: Keys) -> None:
    """The mirror's certification of the vendor's user IDs confers nothing: left out. (gpg
    lists the certified user IDs in another order; the keyring keeps the file's order.)"""
    keyring = installed(pinned_keyring(keys.certified, keys.pinned))
    assert keyring == clean_export(keys.certified, keys.pinned)
    assert sorted(split(keyring)) == sorted(split(keys.two_user_ids))


def test_a_wrong_key_is_named(keys: Keys) -> None:
    result = pinned_keyring(keys.other_armored, keys.pinned)
    assert assert_refused(result) == f"has fingerprint {keys.other}"
    assert result["wrong_key"] and result["found"] == [keys.other]


def test_a_secret_key_is_refused(keys: Keys) -> None:
    assert "secret key material" in assert_refused(pinned_keyring(keys.secret, keys.pinned))


@pytest.mark.parametrize("text", ["", "   \n", "<html>404 Not Found</html>",
                                  "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n"
                                  "-----END PGP PUBLIC KEY BLOCK-----\n",
                                  "-----BEGIN PGP SIGNATURE-----\n\nAAAA\n"
                                  "-----END PGP SIGNATURE-----\n"])
def test_what_is_not_a_key_is_refused(text: str) -> None:
    assert_refused(pinned_keyring(text, "0" * 40))


def test_a_wrong_armor_checksum_is_refused_or_the_clean_key(keys: Keys) -> None:
    lines = keys.armored.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("="))
    lines[index] = "=AAAA" if lines[index] != "=AAAA" else "=BBBB"
    result = pinned_keyring("\n".join(lines), keys.pinned)
    if result["ok"]:
        assert installed(result) == keys.binary
    else:
        assert_refused(result)


# --- The families a mirror controls ---------------------------------------------------------

PIECES = ["pinned", "other", "rsa"]


@settings(max_examples=30, deadline=None)
@given(names=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4),
       separator=st.sampled_from(["", "\n", "\n\n", "\r\n", "  \n\t\n"]))
def test_concatenated_armored_blocks(keys: Keys, names: list[str], separator: str) -> None:
    armored = {"pinned": keys.armored, "other": keys.other_armored, "rsa": keys.rsa_armored}
    fingerprints = {"pinned": keys.pinned, "other": keys.other, "rsa": keys.rsa}
    result = pinned_keyring(separator.join(armored[name] for name in names), keys.pinned)
    if set(names) == {"pinned"}:  # the vendor's block repeated: one key, installed clean
        assert installed(result) == keys.binary
        return
    problem = assert_refused(result)
    others = [fingerprints[name] for name in dict.fromkeys(names) if name != "pinned"]
    if "pinned" in names:
        assert problem.startswith(
            f"holds the pinned key {keys.pinned} and also {', '.join(others)}; "), problem
    else:
        assert problem == f"has fingerprint {', '.join(others)}" and result["wrong_key"]


@settings(max_examples=30, deadline=None)
@given(names=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4))
def test_binary_keyrings_holding_several_keys(keys: Keys, names: list[str]) -> None:
    binary = {"pinned": keys.binary, "other": keys.other_binary, "rsa": keys.rsa_binary}
    fingerprints = {"pinned": keys.pinned, "other": keys.other, "rsa": keys.rsa}
    result = pinned_keyring(b"".join(binary[name] for name in names), keys.pinned)
    if set(names) == {"pinned"}:
        assert installed(result) == keys.binary
        return
    assert_refused(result)
    assert result["found"] == list(dict.fromkeys(fingerprints[name] for name in names))


def test_many_keys_are_named_in_one_line(tmp_path: Path, keys: Keys) -> None:
    """A file of many keys: the line names two and counts the rest."""
    gpg = Gpg(tmp_path / "gnupg")
    try:
        many = [gpg.generate(f"key {number} <k{number}@example.invalid>", "ed25519")
                for number in range(6)]
        stream = keys.binary + b"".join(gpg.export(each) for each in many)
    finally:
        gpg.close()
    problem = assert_refused(pinned_keyring(stream, keys.pinned))
    assert problem.startswith(f"holds the pinned key {keys.pinned} and also {many[0]}, "
                              f"{many[1]} and 4 more;"), problem


@settings(max_examples=40, deadline=None)
@given(before=st.text(max_size=40), after=st.text(max_size=40))
def test_text_around_the_block(keys: Keys, before: str, after: str) -> None:
    """Text around the one block is never part of the keyring: the clean key, or one line."""
    result = pinned_keyring(before + keys.armored + after, keys.pinned)
    if result["ok"]:
        assert installed(result) == keys.binary
    else:
        assert_refused(result)
    if (before + after).strip() == "":
        assert result["ok"], result["problem"]


@settings(max_examples=20, deadline=None)
@given(headers=st.lists(st.sampled_from(["Version: GnuPG v2", "Comment: mirrored copy",
                                          "Comment: https://example.invalid/key"]),
                        max_size=3),
       newline=st.sampled_from(["\n", "\r\n"]))
def test_armor_headers_and_line_endings_change_nothing(keys: Keys, headers: list[str],
                                                       newline: str) -> None:
    result = pinned_keyring(armor(keys.binary, tuple(headers), newline), keys.pinned)
    assert result["keyring"] == pinned_keyring(keys.armored, keys.pinned)["keyring"]


@settings(max_examples=30, deadline=None)
@given(user_id=st.text(min_size=1, max_size=60).filter(lambda text: text != VENDOR_UID),
       signed=st.sampled_from(["unsigned", "self-signature copied", "mirror's certification"]),
       where=st.sampled_from(["after the user ID", "after the subkeys"]))
def test_an_added_user_id_is_left_out(keys: Keys, user_id: str, signed: str,
                                      where: str) -> None:
    """A user ID the vendor never certified: never installed, however signed or placed."""
    packets = split(keys.binary)
    assert [tag for tag, _ in packets] == [6, 13, 2, 14, 2, 14, 2]
    added = [(USER_ID, user_id.encode())]
    if signed == "self-signature copied":
        added.append(packets[2])
    elif signed == "mirror's certification":
        added.append(split(keys.other_binary)[2])
    at = 3 if where == "after the user ID" else len(packets)
    assert installed(pinned_keyring(join(packets[:at] + added + packets[at:]),
                                    keys.pinned)) == keys.binary


@pytest.mark.parametrize("at", [3, 5, 7])
def test_a_subkey_bound_by_another_primary_key_is_left_out(keys: Keys, at: int) -> None:
    """The mirror's subkey with the mirror's binding, spliced among the vendor's subkeys."""
    packets = split(keys.binary)
    foreign = split(keys.other_binary)
    assert [tag for tag, _ in foreign] == [6, 13, 2, 14, 2]
    spliced = join(packets[:at] + foreign[3:5] + packets[at:])
    for key in (spliced, armor(spliced)):
        assert installed(pinned_keyring(key, keys.pinned)) == keys.binary


def test_a_binding_signature_moved_to_another_subkey_leaves_both_out(keys: Keys) -> None:
    """The issuer is the pinned key, but each signature is over the other subkey."""
    primary, uid, certification, sub1, bind1, sub2, bind2 = split(keys.binary)
    keyring = installed(pinned_keyring(join([primary, uid, certification, sub1, bind2, sub2,
                                             bind1]), keys.pinned))
    assert keyring == join([primary, uid, certification])


def test_a_subkey_without_a_binding_is_left_out(keys: Keys) -> None:
    primary, uid, certification, sub1, bind1, sub2, _ = split(keys.binary)
    keyring = installed(pinned_keyring(join([primary, uid, certification, sub1, bind1, sub2]),
                                       keys.pinned))
    assert keyring == join([primary, uid, certification, sub1, bind1])


def test_a_key_without_a_valid_user_id_is_refused(keys: Keys) -> None:
    primary, uid, _certification, *_ = split(keys.binary)
    assert "GnuPG imports none of it" in assert_refused(
        pinned_keyring(join([primary, uid]), keys.pinned))
    assert "GnuPG imports none of it" in assert_refused(
        pinned_keyring(header(6, len(primary[1]), "old") + primary[1], keys.pinned))


MUTATION = st.tuples(st.sampled_from(["flip", "set", "insert", "delete"]),
                     st.integers(min_value=0, max_value=10**6), st.integers(0, 255))


def _mutate(data: bytes, mutations: list[tuple[str, int, int]]) -> bytes:
    buffer = bytearray(data)
    for operation, where, value in mutations:
        position = where % (len(buffer) + 1)
        if operation == "insert":
            buffer.insert(position, value)
        elif position < len(buffer):
            if operation == "delete":
                del buffer[position]
            elif operation == "flip":
                buffer[position] ^= 1 << (value % 8)
            else:
                buffer[position] = value
    return bytes(buffer)


def _check_mutated(keys: Keys, mutated: str | bytes) -> None:
    """Refused in one line, or only what the clean key holds installed, at a fixed point: gpg
    leaves out what no longer verifies, and an edit may delete an unhashed subpacket."""
    result = pinned_keyring(mutated, keys.pinned)
    if not result["ok"]:
        assert_refused(result)
        return
    assert result["found"] == [keys.pinned]
    clean = split(keys.binary)
    assert all(nothing_added(packet, clean) for packet in split(installed(result)))
    again = pinned_keyring(result["keyring"], keys.pinned)
    assert again["keyring"] == result["keyring"]


@settings(max_examples=60, deadline=None)
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_random_corruption_of_a_binary_key(keys: Keys,
                                           mutations: list[tuple[str, int, int]]) -> None:
    _check_mutated(keys, _mutate(keys.binary, mutations))


@settings(max_examples=60, deadline=None)
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_random_corruption_of_an_armored_key(keys: Keys,
                                             mutations: list[tuple[str, int, int]]) -> None:
    mutated = _mutate(keys.armored.encode(), mutations)
    _check_mutated(keys, mutated.decode("utf-8", "surrogateescape"))


def test_a_reduction_gpg_does_not_read_back_is_refused(keys: Keys,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The second GnuPG home is the check on the filter's own code: a signature it broke is
    left out by gpg, and the filter refuses rather than install a key with less in it."""
    original = openpgp._strip_unhashed

    def breaking(body: bytes, dropped: list[int]) -> bytes:
        reduced = bytearray(original(body, dropped))
        if reduced[1] == 0x18:  # a subkey binding: its value altered, it no longer verifies
            reduced[-3] ^= 0x01
        return bytes(reduced)

    monkeypatch.setattr(openpgp, "_strip_unhashed", breaking)
    assert "did not read back unchanged" in assert_refused(
        pinned_keyring(keys.armored, keys.pinned))


class NoGpg:
    """``subprocess`` as the filter sees it on a controller without GnuPG: no program found.

    Patched into the filter's module alone: a PATH changed in os.environ would reach the
    children that the suite's background jobs start meanwhile.
    """

    CompletedProcess = subprocess.CompletedProcess
    TimeoutExpired = subprocess.TimeoutExpired
    PIPE = subprocess.PIPE
    DEVNULL = subprocess.DEVNULL

    def run(self, args: list[str], *_: object, **__: object) -> subprocess.CompletedProcess[bytes]:
        raise FileNotFoundError(2, "No such file or directory", args[0])
