"""apt_update_problem: a refused repository stops at once, a failed download is retried.

The failure lines are apt's messages in apt 2's "E:/W:" form and apt 3's "Error:/Warning:"
form, as apt-get prints them with the C locale. Where they come from: the NO_PUBKEY and "is not
signed" lines are what Debian 12's apt 2.6 printed in this suite's wrong-signer play; the apt 3
lines (sqv's "Missing key", "OpenPGP signature verification failed") are copied from real hosts'
logs in public reports; the rest (EXPKEYSIG/BADSIG, Signed-By conflicts, Release file validity,
a changed Origin) follow apt's message texts as its users report them, not read from apt's
source here. The Hypothesis family buries one of them among
what apt-get prints on every run (Hit/Get/Ign lines, harmless warnings) with any
repository URL; the play-level check is in tests/ansible/test_site.py
(test_repository_signed_by_another_key_is_rejected_by_apt).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters

apt_update_problem = load_filters("apt_update.py")["apt_update_problem"]

FINGERPRINT = "A4B469963BF863CC"

# What apt refuses: a retry gets the same answer. {uri} is the repository.
REFUSED = [
    "W: GPG error: {uri} InRelease: The following signatures couldn't be verified because the"
    f" public key is not available: NO_PUBKEY {FINGERPRINT}",
    "E: The repository '{uri} InRelease' is not signed.",
    "W: GPG error: {uri} InRelease: The following signatures were invalid: EXPKEYSIG"
    f" {FINGERPRINT} NVIDIA CUDA Repository",
    "W: GPG error: {uri} InRelease: The following signatures were invalid: BADSIG"
    f" {FINGERPRINT}",
    "Warning: An error occurred during the signature verification. The repository is not"
    " updated and the previous index files will be used. OpenPGP signature verification"
    " failed: {uri} InRelease: Sub-process /usr/bin/sqv returned an error code (1), error"
    f" message is: Missing key {FINGERPRINT}, which is needed to verify signature.",
    "Error: The repository '{uri} InRelease' is not signed.",
    "E: Conflicting values set for option Signed-By regarding source {uri}:"
    " /usr/share/keyrings/cuda-archive-keyring.gpg != /etc/apt/keyrings/nvidia-cuda.gpg",
    "E: Release file for {uri} InRelease is expired (invalid since 12d 3h 4min 5s)."
    " Updates for this repository will not be applied.",
    "E: Release file for {uri} InRelease is not valid yet (invalid for another 2h 1min 5s)."
    " Updates for this repository will not be applied.",
    "E: Repository '{uri} InRelease' changed its 'Origin' value from 'NVIDIA' to 'Mirror'",
]

# A download that failed: worth another try.
FETCH = [
    "W: Failed to fetch {uri} InRelease  Could not connect to 127.0.0.1:8080 (127.0.0.1)."
    " - connect (111: Connection refused)",
    "W: Failed to fetch {uri} InRelease  Temporary failure resolving"
    " 'developer.download.nvidia.com'",
    "E: Failed to fetch {uri} Packages  503  Service Unavailable [IP: 127.0.0.1 8080]",
    "Warning: Failed to fetch {uri} InRelease  Could not resolve"
    " 'developer.download.nvidia.com'",
    "W: Some index files failed to download. They have been ignored, or old ones used instead.",
    "E: The repository '{uri} Release' does not have a Release file.",
]

# What apt-get prints on a good run, warnings that change nothing included.
BENIGN = [
    "Hit:1 {uri} InRelease",
    "Get:2 {uri} InRelease [1581 B]",
    "Ign:3 {uri} InRelease",
    "Reading package lists...",
    "Fetched 1581 B in 0s (15.2 kB/s)",
    "W: Target Packages (main/binary-amd64/Packages) is configured multiple times in"
    " /etc/apt/sources.list:1 and /etc/apt/sources.list.d/debian.sources:1",
    "W: {uri} InRelease: Key is stored in legacy trusted.gpg keyring (/etc/apt/trusted.gpg),"
    " see the DEPRECATION section in apt-key(8) for details.",
    "W: {uri} InRelease: Signature by key 0123456789ABCDEF uses weak algorithm (rsa1024)",
    "N: Skipping acquire of configured file 'main/binary-i386/Packages' as repository '{uri}'"
    " doesn't support architecture 'i386'",
]

URI = "http://127.0.0.1:8080/compute/cuda/repos/debian12/x86_64"


def _result(lines: list[str], rc: int = 0) -> dict[str, object]:
    """What `register` keeps of apt-get update: E/W lines on stderr, the rest on stdout."""
    errors = [line for line in lines if line.split(":", 1)[0] in {"E", "W", "Error", "Warning"}]
    return {"rc": rc, "stdout": "\n".join(line for line in lines if line not in errors),
            "stderr": "\n".join(errors)}


def test_a_clean_run_is_read() -> None:
    assert apt_update_problem(_result([line.format(uri=URI) for line in BENIGN[:5]])) == {
        "kind": "", "lines": []}


def test_each_refusal_is_not_retried_and_named() -> None:
    for message in REFUSED:
        line = message.format(uri=URI)
        problem = apt_update_problem(_result(["Get:1 x", line], rc=100))
        assert problem["kind"] == "refused", line
        assert problem["lines"] == [line]


def test_each_failed_download_is_retried() -> None:
    for message in FETCH:
        line = message.format(uri=URI)
        assert apt_update_problem(_result([line], rc=0))["kind"] == "fetch", line


def test_apt_get_err_lines_carry_their_reason_on_the_next_line() -> None:
    stdout = (f"Err:3 {URI} InRelease\n  The following signatures couldn't be verified because"
              f" the public key is not available: NO_PUBKEY {FINGERPRINT}\n"
              "Reading package lists...")
    problem = apt_update_problem({"rc": 0, "stdout": stdout, "stderr": ""})
    assert problem["kind"] == "refused"
    assert problem["lines"] == [f"Err:3 {URI} InRelease The following signatures couldn't be"
                                f" verified because the public key is not available: NO_PUBKEY"
                                f" {FINGERPRINT}"]


def test_a_failure_apt_does_not_explain_is_retried_and_says_so() -> None:
    assert apt_update_problem({"rc": 100, "stdout": "", "stderr": ""}) == {
        "kind": "fetch", "lines": ["apt-get update exited 100"]}


uris = st.builds(lambda host, path: f"http://{host}/{path}",
                 st.sampled_from(["127.0.0.1:8080", "deb.debian.org", "[::1]:3142"]),
                 st.text("abcdefghijklmnopqrstuvwxyz0123456789_./-", max_size=40))


@given(st.lists(st.tuples(st.sampled_from(BENIGN), uris), max_size=12),
       st.sampled_from([("refused", m) for m in REFUSED] + [("fetch", m) for m in FETCH]
                       + [("", None)]),
       uris, st.integers(0, 12), st.sampled_from([0, 100]))
def test_the_one_problem_among_any_benign_lines_decides(
        benign: list[tuple[str, str]], planted: tuple[str, str | None], uri: str,
        position: int, rc: int) -> None:
    lines = [message.format(uri=where) for message, where in benign]
    kind, message = planted
    if message is not None:
        lines.insert(min(position, len(lines)), message.format(uri=uri))
    problem = apt_update_problem(_result(lines, rc))
    if message is None:
        assert problem["kind"] == ("fetch" if rc else "")
    else:
        assert problem["kind"] == kind
        assert message.format(uri=uri) in problem["lines"]
        assert all(line.format(uri=where) not in problem["lines"] for line, where in benign)


@given(st.lists(st.sampled_from(REFUSED), min_size=1, max_size=3),
       st.lists(st.sampled_from(FETCH), min_size=1, max_size=3))
def test_a_refusal_wins_over_failed_downloads(refused: list[str], fetch: list[str]) -> None:
    """A retry cannot help when one repository is refused, whatever else failed."""
    lines = [m.format(uri=URI) for m in fetch] + [m.format(uri=URI) for m in refused]
    assert apt_update_problem(_result(lines, 100))["kind"] == "refused"
