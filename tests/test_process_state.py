"""No test changes state the whole pytest process shares; the few that may say why.

The background jobs (tests/support/background.py) run plays, stub repositories and the
private Docker engine in a worker thread of this process while the foreground tests
run: a child started meanwhile inherits the process's environment, working directory
and umask, and the thread's own code reads ``tempfile.tempdir`` and calls the standard
library's functions. ``tests/process_state.py`` lists every change a test's source
makes to any of those (its docstring has the forms); this test fails on each one not
allowed below, with the file, the line and the fix. So a test gives its child its own
``env=``/``cwd=``/``umask=``, patches the one module's view it tests, or passes ``dir=``.

Allowed without an entry: environment variables that only this repository's own code
reads in this process, never a child the background jobs start: the ``WORKLOADS_``
prefix and :data:`READ_IN_PROCESS_ONLY`. A name the source does not give as a constant
is never allowed that way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.process_state import Constants, Finding, scan, scan_source

ROOT = Path(__file__).resolve().parents[1]

# Environment variables read only by this repository's code in this process.
OWN_PREFIX = "WORKLOADS_"
READ_IN_PROCESS_ONLY: dict[str, str] = {
    "NGC_API_KEY":
        "read by tfhost's `--env NGC_API_KEY` (scripts/tfhost/commands/common.py) in this "
        "process; the roles take the key from the vault, and no play, engine or stub reads it",
}
# (path, what) -> why that file may change that for the whole process.
ALLOWED: dict[tuple[str, str], str] = {
    ("tests/support/docker_engine.py", "env DOCKER_HOST"):
        "the session's engine, set once in pytest_configure before any job's thread or test "
        "starts and restored in pytest_unconfigure: every child sees the same value",
    ("tests/support/child_stdin.py", "setattr subprocess.Popen.__init__"):
        "installed once in pytest_configure, before any thread or child: it is what gives "
        "every child of the session its own stdin (tests/test_stdio.py)",
}


def allowed(finding: Finding) -> bool:
    kind, _, name = finding.what.partition(" ")
    if kind == "env" and (name.startswith(OWN_PREFIX) or name in READ_IN_PROCESS_ONLY):
        return True
    return (finding.path, finding.what) in ALLOWED


@pytest.fixture(scope="module")
def found() -> list[Finding]:
    return scan(ROOT)


def test_no_test_changes_what_the_whole_process_shares(found: list[Finding]) -> None:
    wrong = [f for f in found if not allowed(f)]
    assert not wrong, "changes the whole process's state (a background job's children and " \
        "threads see it); the fix, or an entry in ALLOWED with a reason:\n" + \
        "\n".join(map(str, wrong))


def test_every_allowance_gives_a_reason() -> None:
    assert all(len(why) > 40 for why in [*ALLOWED.values(), *READ_IN_PROCESS_ONLY.values()])


def test_every_allowance_is_still_used(found: list[Finding]) -> None:
    """An entry whose code changed is stale: it would let the next one in."""
    used = {(f.path, f.what) for f in found}
    names = {f.what.partition(" ")[2] for f in found if f.what.startswith("env ")}
    assert [key for key in ALLOWED if key not in used] == []
    assert [name for name in READ_IN_PROCESS_ONLY if name not in names] == []


# --- the scanner itself: each form on planted source ------------------------------------

FLAGGED: list[tuple[str, str]] = [
    # the environment, by name
    ('import os\nos.environ["PATH"] = "x"', "env PATH"),
    ('import os\nos.environ["PATH"] += ":x"', "env PATH"),
    ('import os\ndel os.environ["HOME"]', "env HOME"),
    ('from os import environ\nenviron["TMPDIR"] = "x"', "env TMPDIR"),
    ('import os as o\no.environ["LC_ALL"] = "C"', "env LC_ALL"),
    ('import os\nos.environ.update(PATH="x", HOME="y")', "env PATH"),
    ('import os\nos.environ.update(PATH="x", HOME="y")', "env HOME"),
    ('import os\nos.environ.update({"PYTHONPATH": "x"})', "env PYTHONPATH"),
    ('import os\nos.environ |= {"ANSIBLE_LIBRARY": "x"}', "env ANSIBLE_LIBRARY"),
    ('import os\nos.environ.pop("DOCKER_HOST", None)', "env DOCKER_HOST"),
    ('import os\nos.environ.setdefault("LANG", "C")', "env LANG"),
    ('import os\nos.environ.__setitem__("PATH", "x")', "env PATH"),
    ('import os\nos.environ.__delitem__("PATH")', "env PATH"),
    ('import os\nos.putenv("PATH", "x")', "env PATH"),
    ('import os\nos.unsetenv("HOME")', "env HOME"),
    ('def t(monkeypatch):\n    monkeypatch.setenv("PATH", "x")', "env PATH"),
    ('def t(mp):\n    mp.delenv("HOME", raising=False)', "env HOME"),
    ('import pytest\nwith pytest.MonkeyPatch.context() as p:\n    p.setenv("TMPDIR", "x")',
     "env TMPDIR"),
    ('def t(monkeypatch):\n    monkeypatch.setenv(name="CC", value="x")', "env CC"),
    ('import os\ndef t(monkeypatch):\n    monkeypatch.setitem(os.environ, "PATH", "x")',
     "env PATH"),
    ('import os\nfrom unittest import mock\nwith mock.patch.dict(os.environ, {"HOME": "x"}):\n'
     "    pass", "env HOME"),
    ('NAME = "PATH"\ndef t(monkeypatch):\n    monkeypatch.setenv(NAME, "x")', "env PATH"),
    ('from tests.vm import emulation\ndef t(monkeypatch):\n'
     '    monkeypatch.setenv(emulation.OPT_IN, "1")', "env TFHOST_TEST_EMULATED_GUESTS"),
    ("from workloads import netbind\ndef t(monkeypatch):\n"
     '    monkeypatch.setenv(netbind.MODE_ENV, "any")', "env WORKLOADS_WORKER_BIND"),
    # ... and by a name the source does not give as a constant
    ('def t(monkeypatch, name):\n    monkeypatch.setenv(name, "x")', "env ?"),
    ('def t(monkeypatch):\n    for n in ("A", "B"):\n        monkeypatch.delenv(n)', "env ?"),
    ('import os\nos.environ[f"LC_{x}"] = "C"', "env ?"),
    ('import os\nos.putenv(key, "x")', "env ?"),
    # the whole environment
    ("import os\nos.environ.clear()", "environ"),
    ("import os\nos.environ.update(saved)", "environ"),
    ("import os\nos.environ.update(**saved)", "environ"),
    ("import os\nos.environ = {}", "environ"),
    ("import os\ndef t(monkeypatch):\n    monkeypatch.setattr(os, 'environ', {})", "environ"),
    ("import os\nfrom unittest import mock\nmock.patch.dict(os.environ, {}, clear=True)",
     "environ"),
    ("from unittest import mock\nmock.patch.dict('os.environ', values)", "environ"),
    # the working directory
    ("import os\nos.chdir(p)", "cwd"),
    ("import os\nos.fchdir(fd)", "cwd"),
    ("def t(monkeypatch, tmp_path):\n    monkeypatch.chdir(tmp_path)", "cwd"),
    ("import contextlib\nwith contextlib.chdir(p):\n    pass", "cwd"),
    ("from contextlib import chdir\nwith chdir(p):\n    pass", "cwd"),
    ("def t(pytester):\n    pass", "pytester"),
    ("def t(testdir):\n    pass", "pytester"),
    # tempfile
    ("import tempfile\ndef t(monkeypatch, tmp_path):\n"
     "    monkeypatch.setattr(tempfile, 'tempdir', str(tmp_path))", "tempfile"),
    ("import tempfile\ntempfile.tempdir = '/x'", "tempfile"),
    ("import tempfile\nsetattr(tempfile, 'tempdir', '/x')", "tempfile"),
    ("def t(monkeypatch):\n    monkeypatch.setattr('tempfile.tempdir', '/x')", "tempfile"),
    ("import tempfile as t\nt.tempdir = '/x'", "tempfile"),
    # the umask
    ("import os\nold = os.umask(0o002)", "umask"),
    ("from os import umask\numask(0)", "umask"),
    # the standard library's functions, every thread's
    ("import socket\ndef t(monkeypatch):\n    monkeypatch.setattr(socket, 'getaddrinfo', f)",
     "setattr socket.getaddrinfo"),
    ("import os\ndef t(monkeypatch):\n    monkeypatch.setattr(os, 'scandir', f)",
     "setattr os.scandir"),
    ("def t(monkeypatch):\n    import subprocess\n    monkeypatch.setattr(subprocess, 'run', f)",
     "setattr subprocess.run"),
    ("def t(monkeypatch):\n    monkeypatch.setattr('shutil.which', f)", "setattr shutil.which"),
    ("from pathlib import Path\ndef t(monkeypatch):\n    monkeypatch.setattr(Path, 'home', f)",
     "setattr pathlib.Path.home"),
    ("import subprocess\nsubprocess.run = f", "setattr subprocess.run"),
    ("from unittest import mock\nimport os\nwith mock.patch.object(os, 'getcwd', f):\n    pass",
     "setattr os.getcwd"),
    ("from unittest import mock\nwith mock.patch('socket.getaddrinfo', f):\n    pass",
     "setattr socket.getaddrinfo"),
]

CLEAN: list[str] = [
    # a child's own environment, directory and umask
    'import os, subprocess\nsubprocess.run(c, env={**os.environ, "PATH": p}, cwd=d, umask=2)',
    'import os\nenv = dict(os.environ)\nenv["PATH"] = "x"\nenv.pop("HOME")',
    'import os\nvalue = os.environ["PATH"]\nother = os.environ.get("HOME")',
    # the module's own view
    'def t(monkeypatch):\n    monkeypatch.setattr(openpgp, "tempfile", shim)',
    "from workloads.netbind import address\ndef t(monkeypatch):\n"
    "    monkeypatch.setattr(address, 'socket', shim)",
    "import tfhost.scaling\ndef t(monkeypatch):\n"
    "    monkeypatch.setattr(tfhost.scaling, 'subprocess', shim)",
    'import tempfile\ntempfile.mkdtemp(dir=d)',
    # a mapping of the test's own, and methods of the same names on other things
    'def t(monkeypatch, d):\n    monkeypatch.setitem(d, "PATH", "x")',
    'settings = {}\nsettings.update(PATH="x")\nsettings.pop("HOME")',
    # a child's program text is the child's
    'CHILD = """import os\\nos.environ["PATH"] = "x"\\nos.chdir("/")\\n"""',
]


def _whats(source: str) -> list[str]:
    return [f.what for f in scan_source("snippet.py", source, Constants(ROOT))]


@pytest.mark.parametrize(("source", "what"), FLAGGED)
def test_each_form_is_found(source: str, what: str) -> None:
    assert what in _whats(source)


@pytest.mark.parametrize("source", CLEAN)
def test_what_stays_with_one_test_or_child_is_not_found(source: str) -> None:
    assert _whats(source) == []


@pytest.mark.parametrize(("what", "fails"), [
    ("env WORKLOADS_CACHE", False), ("env NGC_API_KEY", False), ("env PATH", True),
    ("env HOME", True), ("env ?", True), ("env CUDA_VISIBLE_DEVICES", True), ("cwd", True),
    ("environ", True), ("tempfile", True), ("umask", True), ("setattr os.scandir", True),
])
def test_only_the_process_own_names_pass_without_an_entry(what: str, fails: bool) -> None:
    finding = Finding("tests/x/test_planted.py", 1, what, "")
    assert allowed(finding) is not fails
    assert finding.fix and str(finding).startswith("tests/x/test_planted.py:1: ")
