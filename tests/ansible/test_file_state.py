"""ansible/library/file_state.py and the file_in_place filter: one look, write what differs.

The roles survey the files they template with one file_state run and skip a template task
where file_in_place says the file already holds what the task would write (an idle re-run
then asks the host once, not twice per file). So the filter must say "in place" exactly
where the template task would report ok: the play below writes a file with the template
module, then checks the survey of it against the lookup's rendering of the same template,
and against each attribute changed by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

from tests.ansible.filter_plugin import load_filters
from tests.ansible.playbook import run_local_play

filters = load_filters("file_in_place.py")
file_in_place, file_state_as_stat = filters["file_in_place"], filters["file_state_as_stat"]

TEMPLATE = """# {{ ansible_managed }}
{% for name in names %}
{{ name }}
{% endfor %}
{% if extra %}
extra line
{% endif %}
"""


def _state(content: str, **attributes: object) -> dict[str, object]:
    return {"exists": True, "type": "file", "mode": "0644", "owner": "root", "group": "root",
            "checksum": hashlib.sha1(content.encode()).hexdigest(), **attributes}


def test_in_place_only_with_the_content_and_every_attribute_given() -> None:
    files = {"/f": _state("a\n"), "/l": _state("a\n", type="link"), "/x": {"exists": False}}
    assert file_in_place(files, "/f", "a\n", mode="0644", owner="root", group="root")
    assert file_in_place(files, "/f", "a\n")  # attributes not given are not compared
    assert not file_in_place(files, "/f", "a")
    assert not file_in_place(files, "/f", "a\n", mode="0600")
    assert not file_in_place(files, "/f", "a\n", owner="tfuser")
    assert not file_in_place(files, "/f", "a\n", group="docker")
    assert file_in_place(files, "/f", "a\n", mode="644")  # as the template task reads it
    assert not file_in_place(files, "/l", "a\n")  # a symlink: the task decides
    assert not file_in_place(files, "/x", "a\n")
    assert not file_in_place(files, "/nowhere", "a\n")
    assert not file_in_place({}, "/f", "a\n")


def test_the_survey_agrees_with_the_template_task(tmp_path: Path) -> None:
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "managed.j2").write_text(TEMPLATE)
    managed, other = tmp_path / "managed.conf", tmp_path / "other.conf"
    link, big, result = tmp_path / "link.conf", tmp_path / "big.conf", tmp_path / "result.json"
    other.write_text("site's own\n")
    os.chmod(other, 0o600)
    link.symlink_to(other)
    big.write_bytes(b"x" * 100)
    render = "lookup('ansible.builtin.template', 'managed.j2')"
    play = [{
        "name": "Write with the template task, then survey",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {"names": ["one", "two"], "extra": True},
        "tasks": [
            {"name": "Write it", "ansible.builtin.template": {
                "src": "managed.j2", "dest": str(managed), "mode": "0644"}},
            {"name": "Look", "file_state": {
                "paths": [str(managed), str(other), str(link), str(big), str(tmp_path / "none")],
                "read": [str(other), str(link), str(big)], "max_bytes": 50},
             "register": "look"},
            {"name": "Write it again (ok: nothing to change)", "ansible.builtin.template": {
                "src": "managed.j2", "dest": str(managed), "mode": "0644"},
             "register": "again"},
            {"name": "Keep what was seen", "ansible.builtin.copy": {
                "dest": str(result), "mode": "0644",
                "content": "{{ {'files': look.files, 'again': again is changed,"
                           f" 'in_place': look.files | file_in_place('{managed}', {render},"
                           " mode='0644', owner='root', group='root'),"
                           f" 'wrong_mode': look.files | file_in_place('{managed}', {render},"
                           " mode='0600'),"
                           f" 'other': look.files | file_in_place('{other}', {render})"
                           "} | to_json }}"}},
        ],
    }]
    run = run_local_play(tmp_path, play)
    assert run.returncode == 0, run.explain()
    seen = json.loads(result.read_text())
    assert seen["again"] is False  # the template task too says the file is in place
    assert seen["in_place"] is True
    assert seen["wrong_mode"] is False
    assert seen["other"] is False
    files = seen["files"]
    assert files[str(managed)]["checksum"] == hashlib.sha1(managed.read_bytes()).hexdigest()
    assert files[str(other)] | {"checksum": None} == {
        "exists": True, "type": "file", "owner": "root", "group": "root", "uid": 0, "gid": 0,
        "mode": "0600", "size": 11, "checksum": None,
        "content": base64.b64encode(b"site's own\n").decode()}
    # Not followed: a symlink is a link, with nothing read through it; stat's keys for it.
    assert files[str(link)]["type"] == "link" and "content" not in files[str(link)]
    assert file_state_as_stat(files[str(link)]) == {
        "exists": True, "islnk": True, "isdir": False, "isreg": False, "pw_name": "root",
        "gr_name": "root", "mode": "0777", "lnk_source": str(other)}
    assert file_state_as_stat(files[str(tmp_path / "none")]) == {"exists": False}
    assert files[str(big)]["too_large"] is True and "content" not in files[str(big)]
    assert files[str(tmp_path / "none")] == {"exists": False}


def test_a_path_to_read_that_is_not_surveyed_fails_the_task(tmp_path: Path) -> None:
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Look", "file_state": {"paths": [str(tmp_path)], "read": ["/etc/hostname"]}}]}]
    run = run_local_play(tmp_path, play)
    assert run.returncode != 0
    assert "read names paths not in paths: /etc/hostname" in run.output, run.explain()


def test_a_file_swapped_after_its_look_is_not_read(tmp_path: Path) -> None:
    """Between lstat and the read, a user-owned file (~/.docker/config.json) may become a
    link to a root-only file, a FIFO or another file: none of them is read, none blocks."""
    from tests.ansible.filter_plugin import load_library_module

    read_same_file = load_library_module("file_state.py")._read_same_file
    secret = tmp_path / "shadow"
    secret.write_text("root:secret\n")
    path = tmp_path / "config.json"
    swaps = {
        "link": lambda: path.symlink_to(secret),
        "fifo": lambda: os.mkfifo(path),
        "other file": lambda: path.write_text("{\"other\": 1}"),
    }
    for what, swap in swaps.items():
        path.write_text("{}")
        seen = os.lstat(path)
        assert read_same_file(str(path), seen, 100) == (hashlib.sha1(b"{}").hexdigest(), b"{}")
        assert read_same_file(str(path), seen, None) == (hashlib.sha1(b"{}").hexdigest(), None)
        path.rename(tmp_path / f"aside-{what}")  # kept: its inode is not reused
        swap()
        assert read_same_file(str(path), seen, 100) is None, what
        assert read_same_file(str(path), seen, None) is None, what  # not hashed either
        path.unlink()


class _Stopped(Exception):
    pass


class _Module:
    """What path_state asks of its AnsibleModule: the real sha1 (for the code before it hashed
    the file itself), and fail_json, which stops here as it exits there."""

    sha1 = AnsibleModule.sha1
    digest_from_file = AnsibleModule.digest_from_file

    def __init__(self) -> None:
        self.failure = ""

    def fail_json(self, msg: str) -> None:
        self.failure = msg
        raise _Stopped(msg)


def test_a_file_swapped_after_its_lstat_is_neither_hashed_nor_waited_on(tmp_path: Path) -> None:
    """The checksum comes from the file lstat saw, for paths not read too: ngc's look at a
    user's ~/.docker/config.json (written by the user) must not give the SHA-1 of a root-only
    file the user linked there after the lstat, nor hang the play on a FIFO put there."""
    import threading
    import types

    from tests.ansible.filter_plugin import load_library_module

    file_state = load_library_module("file_state.py")
    secret = tmp_path / "shadow"
    secret.write_text("root:secret\n")
    path = tmp_path / "config.json"
    swaps = {"link": lambda: path.symlink_to(secret), "fifo": lambda: os.mkfifo(path)}
    for what, swap in swaps.items():
        path.write_text("{}")

        def lstat_then_swap(name: str, swap: object = swap, what: str = what) -> os.stat_result:
            seen = os.lstat(name)
            path.rename(tmp_path / f"aside-{what}")  # the user's swap, right after the look
            swap()  # type: ignore[operator]
            return seen

        # Only this loaded copy of the module sees the swap (no process-wide patch).
        file_state.os = types.SimpleNamespace(  # type: ignore[attr-defined]
            **{**vars(os), "lstat": lstat_then_swap})
        module, outcome = _Module(), dict[str, object]()

        def look(module: _Module = module, outcome: dict[str, object] = outcome) -> None:
            try:
                outcome["state"] = file_state.path_state(module, str(path), False, 100)
            except _Stopped:
                outcome["stopped"] = True

        looking = threading.Thread(target=look, daemon=True)
        looking.start()
        looking.join(10)
        if looking.is_alive():  # blocked opening the FIFO: unblock it, then fail
            with open(path, "wb"):
                pass
            looking.join(10)
            raise AssertionError(f"{what}: the look waited on a FIFO swapped in after its lstat")
        assert outcome.get("stopped"), f"{what}: {outcome}"
        assert "changed while it was read" in module.failure
        assert "state" not in outcome  # no SHA-1 of the secret
        path.unlink()
