"""Ansible filter: what went wrong in an `apt-get update` run, and whether a retry can help.

Why: the role refreshes apt's indexes after it adds or changes a repository. Two kinds of
failure look alike in apt-get's exit status and need opposite handling:

* apt fetched a repository and refused it: the signature does not verify against the
  keyring its entry names (NO_PUBKEY, BADSIG, "is not signed", sqv's "Missing key"), two
  entries disagree on Signed-By, the Release file has expired or is not valid yet, or its
  Origin/Label/Suite changed. The same request gives the same answer: a retry only makes
  the operator wait (Ansible's apt module retries five times, about half a minute, with a
  warning per try), and the fix is in the configuration or the key.
* a download failed (connection, DNS, a mirror mid-sync, 5xx, a repository with no Release
  file: a URL that is wrong or a server that is down look the same): worth a retry, then
  the fix is the network or the URL.

apt also warns about harmless things (a target configured twice, a key in the legacy
trusted.gpg keyring, a weak signature algorithm), and apt 3 writes "Warning:"/"Error:"
where apt 2 writes "W:"/"E:". So the decision reads apt's messages, not only the exit
status, and run with the C locale so that the messages are apt's English ones.

    {{ update_result | apt_update_problem }}
    -> {"kind": "", "lines": []}                 every index read
    -> {"kind": "refused", "lines": [...]}       apt refused what it fetched: stop now
    -> {"kind": "fetch", "lines": [...]}         a download failed (or apt failed without
                                                 saying why): retry, then stop

`lines` are apt's own lines that say what went wrong (its E:/W:/Err: lines with the
continuation lines under an Err:), for the play's one-line message.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

# apt 2 ("E: ", "W: "), apt 3 ("Error: ", "Warning: "), and apt-get's per-item "Err:N uri".
_PREFIXED = re.compile(r"^(?:E|W|Error|Warning|Err(?::\d+)?)(?::|\s)")

# apt refused what it fetched: the same request gives the same answer.
_REFUSED = re.compile(
    r"NO_PUBKEY|EXPKEYSIG|REVKEYSIG|BADSIG|ERRSIG|NODATA|"
    r"GPG error|OpenPGP signature verification failed|Missing key|"
    r"signatures couldn't be verified|signatures were invalid|is not signed|"
    r"Conflicting values set for option Signed-By|"
    r"is expired|is not valid yet|changed its '[A-Za-z-]+' value"
)

# A download failed: worth another try.
_FETCH = re.compile(r"Failed to fetch|Some index files failed to download|"
                    r"does not have a Release file|no longer has a Release file|"
                    r"Could not (?:connect|resolve)|Temporary failure resolving|"
                    r"Unable to connect|Connection (?:failed|timed out|refused)")


def _problem_lines(text: str) -> list[str]:
    """apt's lines that report a failure, each with the indented lines under it."""
    lines: list[str] = []
    for line in text.splitlines():
        if _PREFIXED.match(line):
            lines.append(line.strip())
        elif lines and line.startswith((" ", "\t")) and line.strip():
            lines[-1] = f"{lines[-1]} {line.strip()}"
    return [line for line in lines if _REFUSED.search(line) or _FETCH.search(line)
            or line.startswith(("E:", "Error:", "Err"))]


def apt_update_problem(result: Mapping[str, Any]) -> dict[str, Any]:
    """Classify a registered `apt-get update` result: '' (read), 'refused' or 'fetch'."""
    text = "\n".join(str(result.get(stream) or "") for stream in ("stdout", "stderr"))
    lines = _problem_lines(text)
    refused = [line for line in lines if _REFUSED.search(line)]
    if refused:
        return {"kind": "refused", "lines": refused}
    if lines or int(result.get("rc") or 0) != 0:
        return {"kind": "fetch", "lines": lines or [f"apt-get update exited {result.get('rc')}"]}
    return {"kind": "", "lines": []}


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"apt_update_problem": apt_update_problem}
