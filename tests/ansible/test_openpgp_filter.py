"""The key filter accepts exactly the pinned key and rebuilds it; every other input is refused.

repo_trust installs what `openpgp_pinned_keyring` returns, never the fetched file, so the
filter is the whole defence against a mirror that serves the vendor's key plus something
of its own. The families below are what such a mirror controls: concatenated keys
(armored and binary), text around the block, user IDs and subkeys added by packet
surgery, and random corruption. The keys are made once per module by the real gpg
(Ed25519 and RSA); the vendors' own published keys are checked too
(tests/fixtures/vendor_keys).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_plugin
from tests.ansible.playbook import ANSIBLE_DIR, run_local_play
from tests.fixtures.vendor_keys import VENDOR_KEYS
from tests.support.loopback_http import serve_directory

openpgp = load_plugin("openpgp.py")
VENDOR_UID = "vendor signing key <vendor@example.invalid>"


def pinned_keyring(key: str | bytes, fingerprint: str) -> dict[str, Any]:
    result: dict[str, Any] = openpgp.FilterModule().filters()["openpgp_pinned_keyring"](
        key, fingerprint)
    return result


def assert_refused(result: dict[str, Any]) -> str:
    """A refusal is one non-empty line, and nothing to install comes with it."""
    assert not result["ok"], "accepted an input that is not exactly the pinned key"
    problem: str = result["problem"]
    assert problem and "\n" not in problem and "\r" not in problem, repr(problem)
    assert result["keyring"] == ""
    return problem


def packet(tag: int, body: bytes) -> bytes:
    """A new-format packet (what gpg writes)."""
    if len(body) < 192:
        length = bytes([len(body)])
    elif len(body) < 8384:
        length = bytes([((len(body) - 192) >> 8) + 192, (len(body) - 192) & 0xFF])
    else:
        length = b"\xff" + len(body).to_bytes(4, "big")
    return bytes([0xC0 | tag]) + length + body


def raw_packets(binary: bytes) -> list[bytes]:
    return [each.raw for each in openpgp._packets(binary)]


def tags(binary: bytes) -> list[int]:
    return [each.tag for each in openpgp._packets(binary)]


# --- Keys made by gpg, once per module --------------------------------------------------


class Gpg:
    """gpg in its own home directory; the agent is stopped when the module is done."""

    def __init__(self, home: Path) -> None:
        home.mkdir(mode=0o700)
        self.env = {**os.environ, "GNUPGHOME": str(home)}

    def run(self, *args: str, data: bytes | None = None) -> bytes:
        return subprocess.run(
            ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "",
             *args], input=data, env=self.env, check=True, capture_output=True).stdout

    def generate(self, user_id: str, algorithm: str) -> str:
        self.run("--quick-generate-key", user_id, algorithm, "sign", "never")
        colons = self.run("--with-colons", "--list-keys", user_id).decode()
        return next(line.split(":")[9] for line in colons.splitlines()
                    if line.startswith("fpr:"))

    def export(self, fingerprint: str, *options: str) -> bytes:
        return self.run("--export", *options, fingerprint)

    def close(self) -> None:
        subprocess.run(["gpgconf", "--kill", "all"], env=self.env, check=False,
                       capture_output=True)


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
    assert result["ok"], result["problem"]
    assert result["found"] == [fingerprint]
    assert openpgp._dearmor(result["keyring"]) == openpgp._dearmor(text)


def test_clean_exports_are_rebuilt_packet_for_packet(keys: Keys) -> None:
    cases: list[tuple[str | bytes, str, bytes]] = [
        (keys.armored, keys.pinned, keys.binary),
        (keys.binary, keys.pinned, keys.binary),
        (keys.rsa_armored, keys.rsa, keys.rsa_binary),
        (keys.two_user_ids, keys.pinned, keys.two_user_ids),
    ]
    for key, fingerprint, binary in cases:
        result = pinned_keyring(key, fingerprint)
        assert result["ok"], result["problem"]
        assert result["found"] == [fingerprint]
        assert openpgp._dearmor(result["keyring"]) == binary


@pytest.mark.parametrize("algorithm", ["nistp256", "nistp384", "rsa3072"])
def test_other_algorithms_verify(tmp_path: Path, algorithm: str) -> None:
    """ECDSA and larger RSA keys, with a subkey, as other vendors publish them."""
    gpg = Gpg(tmp_path / "gnupg")
    try:
        fingerprint = gpg.generate(f"{algorithm} vendor <v@example.invalid>", algorithm)
        gpg.run("--quick-add-key", fingerprint, algorithm, "encr", "never")
        binary = gpg.export(fingerprint)
    finally:
        gpg.close()
    result = pinned_keyring(binary, fingerprint)
    assert result["ok"], result["problem"]
    assert openpgp._dearmor(result["keyring"]) == binary
    primary, uid, certification, subkey, binding = raw_packets(binary)
    tampered = bytearray(binding)
    tampered[-5] ^= 0x01  # inside the signature value
    assert "does not verify" in assert_refused(pinned_keyring(
        b"".join([primary, uid, certification, subkey, bytes(tampered)]), fingerprint))


def test_binary_read_through_ansibles_text_conversion_is_accepted(keys: Keys) -> None:
    """`uri` returns content as text with undecodable bytes kept as surrogates."""
    as_text = keys.binary.decode("utf-8", "surrogateescape")
    result = pinned_keyring(as_text, keys.pinned)
    assert result["ok"], result["problem"]


def test_a_key_file_fetched_as_repo_trust_fetches_it(keys: Keys, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
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
    monkeypatch.setenv("ANSIBLE_LIBRARY", str(ANSIBLE_DIR / "roles" / "repo_trust" / "library"))
    with serve_directory(served, tmp_path / "http.log") as base_url:
        tasks: list[dict[str, Any]] = [
            {"name": f"fetch {name}", "repo_trust_fetch": {"url": f"{base_url}/{name}"},
             "register": f"fetched_{index}"} for index, name in enumerate(files)]
        tasks.append({"name": "check", "ansible.builtin.debug": {"msg": [
            f"RESULT {name}: {{{{ (fetched_{index}.content_base64 | openpgp_pinned_keyring("
            f"'{keys.pinned}', encoding='base64')).problem or 'accepted' }}}}"
            for index, name in enumerate(files)]}})
        run = run_local_play(tmp_path, [{"hosts": "localhost", "gather_facts": False,
                                         "tasks": tasks}])
    assert run.returncode == 0, run.explain()
    flat = " ".join(run.output.split())
    assert "RESULT one.gpg: accepted" in flat
    assert "RESULT one.asc: accepted" in flat
    assert f"RESULT two.gpg: holds the pinned key {keys.pinned} and also {keys.other};" in flat


def test_the_rebuilt_keyring_is_the_pinned_key_to_gpg_and_gpgv(keys: Keys,
                                                               tmp_path: Path) -> None:
    """gpg sees one primary key (the pinned one) and its subkeys; gpgv verifies with it."""
    result = pinned_keyring(keys.armored, keys.pinned)
    listing = subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys"],
                             input=result["keyring"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    records = [line.split(":") for line in listing]
    assert [fields[0] for fields in records if fields[0] in ("pub", "sub")] == [
        "pub", "sub", "sub"]
    assert next(fields[9] for fields in records if fields[0] == "fpr") == keys.pinned
    keyring = tmp_path / "pinned.gpg"
    keyring.write_bytes(openpgp._dearmor(result["keyring"]))
    (tmp_path / "Release").write_bytes(keys.signed_data)
    (tmp_path / "Release.gpg").write_bytes(keys.signature)
    verified = subprocess.run(["gpgv", "--keyring", str(keyring), str(tmp_path / "Release.gpg"),
                               str(tmp_path / "Release")], capture_output=True, text=True,
                              check=False)
    assert verified.returncode == 0, verified.stderr


def test_a_third_party_certification_is_left_out(keys: Keys) -> None:
    """The mirror's certification of the vendor's user IDs confers nothing: dropped, said so."""
    result = pinned_keyring(keys.certified, keys.pinned)
    assert result["ok"], result["problem"]
    assert len(result["notes"]) == 2
    assert all(keys.other in note for note in result["notes"])
    assert sorted(raw_packets(openpgp._dearmor(result["keyring"]))) == sorted(
        raw_packets(keys.two_user_ids))


def test_a_wrong_key_is_named(keys: Keys) -> None:
    result = pinned_keyring(keys.other_armored, keys.pinned)
    assert assert_refused(result) == f"has fingerprint {keys.other}"
    assert result["wrong_key"] and result["found"] == [keys.other]


def test_a_secret_key_is_refused(keys: Keys) -> None:
    assert "PRIVATE KEY BLOCK" in assert_refused(pinned_keyring(keys.secret, keys.pinned))
    binary = openpgp._dearmor(keys.secret.replace("PRIVATE KEY", "PUBLIC KEY"))
    assert "starts with a secret key packet" in assert_refused(pinned_keyring(binary,
                                                                              keys.pinned))


@pytest.mark.parametrize("text", ["", "   \n", "<html>404 Not Found</html>",
                                  "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!\n"
                                  "-----END PGP PUBLIC KEY BLOCK-----\n",
                                  "-----BEGIN PGP SIGNATURE-----\n\nAAAA\n"
                                  "-----END PGP SIGNATURE-----\n"])
def test_what_is_not_a_key_is_refused(text: str) -> None:
    assert_refused(pinned_keyring(text, "0" * 40))


def test_a_wrong_armor_checksum_is_refused(keys: Keys) -> None:
    lines = keys.armored.splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("="))
    lines[index] = "=AAAA" if lines[index] != "=AAAA" else "=BBBB"
    assert "checksum" in assert_refused(pinned_keyring("\n".join(lines), keys.pinned))


# --- The families a mirror controls ---------------------------------------------------------

PIECES = ["pinned", "other", "rsa"]


@settings(max_examples=60)
@given(names=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4),
       separator=st.sampled_from(["", "\n", "\n\n", "\r\n", "  \n\t\n"]))
def test_concatenated_armored_blocks(keys: Keys, names: list[str], separator: str) -> None:
    armored = {"pinned": keys.armored, "other": keys.other_armored, "rsa": keys.rsa_armored}
    result = pinned_keyring(separator.join(armored[name] for name in names), keys.pinned)
    if names == ["pinned"]:
        assert result["ok"], result["problem"]
    else:
        problem = assert_refused(result)
        if len(names) > 1:
            assert f"holds {len(names)} armored blocks" in problem


@settings(max_examples=60)
@given(names=st.lists(st.sampled_from(PIECES), min_size=1, max_size=4))
def test_binary_keyrings_holding_several_keys(keys: Keys, names: list[str]) -> None:
    binary = {"pinned": keys.binary, "other": keys.other_binary, "rsa": keys.rsa_binary}
    fingerprints = {"pinned": keys.pinned, "other": keys.other, "rsa": keys.rsa}
    result = pinned_keyring(b"".join(binary[name] for name in names), keys.pinned)
    if names == ["pinned"]:
        assert result["ok"], result["problem"]
        return
    problem = assert_refused(result)
    assert result["found"] == [fingerprints[name] for name in names]
    if "pinned" in names:
        others = [fingerprints[name] for name in dict.fromkeys(names) if name != "pinned"]
        if others:  # each other key named once, in the file's order
            assert problem.startswith(
                f"holds the pinned key {keys.pinned} and also {', '.join(others)}; "), problem
        else:  # the same key twice: said so, not "and also ;"
            assert problem.startswith(
                f"holds the pinned key {keys.pinned} {len(names)} times; "), problem


@settings(max_examples=100)
@given(before=st.text(max_size=40), after=st.text(max_size=40))
def test_text_around_the_block(keys: Keys, before: str, after: str) -> None:
    """Only whitespace may surround the one block; and it is never part of the keyring."""
    result = pinned_keyring(before + keys.armored + after, keys.pinned)
    if (before + after).strip() == "":
        assert result["ok"], result["problem"]
        assert openpgp._dearmor(result["keyring"]) == keys.binary
    else:
        assert_refused(result)


@settings(max_examples=40)
@given(headers=st.lists(st.sampled_from(["Version: GnuPG v2", "Comment: mirrored copy",
                                          "Comment: https://example.invalid/key"]),
                        max_size=3),
       newline=st.sampled_from(["\n", "\r\n"]))
def test_armor_headers_and_line_endings_change_nothing(keys: Keys, headers: list[str],
                                                       newline: str) -> None:
    begin, blank, *rest = keys.armored.splitlines()
    assert blank == ""
    text = newline.join([begin, *headers, "", *rest]) + newline
    result = pinned_keyring(text, keys.pinned)
    assert result["ok"], result["problem"]
    assert result["keyring"] == pinned_keyring(keys.armored, keys.pinned)["keyring"]


@settings(max_examples=60)
@given(user_id=st.text(min_size=1, max_size=60).filter(lambda text: text != VENDOR_UID),
       signed=st.sampled_from(["unsigned", "self-signature copied", "mirror's certification"]),
       where=st.sampled_from(["after the user ID", "after the subkeys"]))
def test_an_added_user_id(keys: Keys, user_id: str, signed: str, where: str) -> None:
    """A user ID the vendor never certified: refused, however it is signed or placed."""
    packets = raw_packets(keys.binary)
    assert tags(keys.binary) == [6, 13, 2, 14, 2, 14, 2]
    added = [packet(13, user_id.encode())]
    if signed == "self-signature copied":
        added.append(packets[2])
    elif signed == "mirror's certification":
        added.append(raw_packets(keys.other_binary)[2])
    at = 3 if where == "after the user ID" else len(packets)
    problem = assert_refused(pinned_keyring(b"".join(packets[:at] + added + packets[at:]),
                                            keys.pinned))
    if where == "after the subkeys":
        assert "after the subkeys" in problem
    elif signed == "self-signature copied":
        assert "does not verify with the pinned key" in problem
    else:
        assert "that the pinned key has not certified" in problem


@pytest.mark.parametrize("at", [3, 5, 7])
def test_a_subkey_bound_by_another_primary_key(keys: Keys, at: int) -> None:
    """The mirror's subkey with the mirror's binding, spliced among the vendor's subkeys."""
    packets = raw_packets(keys.binary)
    foreign = raw_packets(keys.other_binary)
    assert tags(keys.other_binary) == [6, 13, 2, 14, 2]
    spliced = b"".join(packets[:at] + foreign[3:5] + packets[at:])
    for key in (spliced, openpgp._armor(spliced)):
        problem = assert_refused(pinned_keyring(key, keys.pinned))
        assert f"bound by key {keys.other}, not by the pinned key" in problem


def test_a_binding_signature_moved_to_another_subkey_does_not_verify(keys: Keys) -> None:
    """The issuer is the pinned key, but the signature is over the other subkey."""
    primary, uid, certification, sub1, bind1, sub2, bind2 = raw_packets(keys.binary)
    swapped = b"".join([primary, uid, certification, sub1, bind2, sub2, bind1])
    problem = assert_refused(pinned_keyring(swapped, keys.pinned))
    assert "subkey binding signature on subkey" in problem
    assert "does not verify with the pinned key" in problem


def test_a_subkey_without_a_binding_is_refused(keys: Keys) -> None:
    primary, uid, certification, sub1, bind1, sub2, _ = raw_packets(keys.binary)
    problem = assert_refused(pinned_keyring(
        b"".join([primary, uid, certification, sub1, bind1, sub2]), keys.pinned))
    assert "that the pinned key has not bound" in problem


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
    """Accepted only as the pinned key, rebuilt to a fixed point; else one line."""
    result = pinned_keyring(mutated, keys.pinned)
    if not result["ok"]:
        assert_refused(result)
        return
    assert result["found"] == [keys.pinned]
    again = pinned_keyring(result["keyring"], keys.pinned)
    assert again["ok"] and again["keyring"] == result["keyring"]


@settings(max_examples=200)
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_random_corruption_of_a_binary_key(keys: Keys,
                                           mutations: list[tuple[str, int, int]]) -> None:
    _check_mutated(keys, _mutate(keys.binary, mutations))


@settings(max_examples=200)
@given(mutations=st.lists(MUTATION, min_size=1, max_size=4))
def test_random_corruption_of_an_armored_key(keys: Keys,
                                             mutations: list[tuple[str, int, int]]) -> None:
    mutated = _mutate(keys.armored.encode(), mutations)
    _check_mutated(keys, mutated.decode("utf-8", "surrogateescape"))


@settings(max_examples=100)
@given(mutations=st.lists(MUTATION, min_size=1, max_size=3))
def test_random_corruption_of_an_rsa_key(keys: Keys,
                                         mutations: list[tuple[str, int, int]]) -> None:
    result = pinned_keyring(_mutate(keys.rsa_binary, mutations), keys.rsa)
    if not result["ok"]:
        assert_refused(result)
