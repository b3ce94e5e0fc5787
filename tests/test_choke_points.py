"""One way to write a file, one way to read untrusted bytes, one way to print a record's text.

``tests/choke_points.py`` walks the AST of ``workloads/``, ``scripts/`` and the Ansible
modules and filters and lists every write, decode and raw print outside the modules
made for them (its docstring says exactly what each rule flags). This test fails on
any finding not in :data:`ALLOWED`, each entry of which says why that code may do it
itself. So a new writer, reader or printer either goes through the choke point or
argues its case here, in review. It reads source only: fast, no import of the code.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.choke_points import Finding, _Visitor, imported_names, module_constants, scan

ROOT = Path(__file__).resolve().parents[1]

# (path, rule, function) -> why it may write, read or print there itself.
ALLOWED: dict[tuple[str, str, str], str] = {
    # --- writes ------------------------------------------------------------------------
    ("workloads/accept/health/command.py", "write", "run"):
        "state.save is workloads.accept.health.state.save, which writes by safefs.write_bytes",
    ("workloads/accept/health/state.py", "write", "load"):
        "sets an unreadable state file aside: a rename inside the directory checked by "
        "safefs.trusted_directory (dir_fd on both sides), nothing created or followed",
    ("workloads/netbind/library.py", "write", "private_directory"):
        "makes the bind library's own 0700 directory by dir_fd inside a parent walked by "
        "safefs.resolve_directory; the same rule, kept with the library's lookup",
    ("workloads/netbind/library.py", "write", "_write_durably"):
        "temporary in the private 0700 directory checked above (no one else can plant there)",
    ("workloads/netbind/library.py", "write", "build"):
        "the C compiler writes by name into the private 0700 directory; its output is "
        "opened O_NOFOLLOW and checked as ours before it is renamed into place",
    ("ansible/roles/repo_trust/library/repo_trust_entries.py", "write", "apply"):
        "an Ansible module: runs alone on the managed host (can import nothing of "
        "workloads), writes root's /etc/apt or /etc/yum.repos.d through atomic_move",
    # --- reads: trusted inputs -------------------------------------------------------
    ("workloads/accept/errors.py", "read", "uptime_minutes"): "/proc/uptime: the kernel's",
    ("workloads/busy.py", "read", "cpu_times"): "/proc/stat: the kernel's",
    ("workloads/envinfo.py", "read", "cpu_bf16_flags"): "/proc/cpuinfo: the kernel's",
    ("workloads/hardware/aer.py", "read", "_hex"): "sysfs attribute: the kernel's, 4 KiB",
    ("workloads/hardware/aer.py", "read", "read_counters"): "sysfs attribute: the kernel's",
    ("workloads/hardware/kernel_log.py", "read", "boot_id"): "/proc boot_id: the kernel's",
    ("workloads/hardware/reference.py", "read", "load"): "the package's own reference.yaml",
    ("workloads/hardware/xid.py", "read", "load"): "the package's own xid.yaml",
    ("workloads/netbind/library.py", "read", "library_name"): "the package's own C source",
    ("workloads/sweep/explorer.py", "read", "render_explorer"): "the package's own template",
    ("workloads/sweep/database.py", "read", "_load"):
        "pickle.loads only after workloads.pickle_walk.check_pickle passed the opcode stream",
    ("ansible/roles/gpu_passthrough/library/gpu_passthrough_facts.py", "read", "_read_hex"):
        "an Ansible module reading a sysfs attribute of the managed host: the kernel's",
    ("ansible/roles/nvidia_driver/library/nvidia_gpu_facts.py", "read", "_hex"):
        "an Ansible module reading a sysfs attribute of the managed host: the kernel's",
    ("ansible/roles/nvidia_driver/library/nvidia_kernel_modules.py", "read", "marker_signed"):
        "an Ansible module reading the tail marker of a kernel module root's DKMS built",
    ("ansible/roles/nvidia_driver/library/nvidia_kernel_modules.py", "read", "build_log"):
        "an Ansible module reading the make.log root's DKMS wrote under /var/lib/dkms",
    ("ansible/roles/nvidia_driver/library/nvidia_kernel_modules.py", "read", "_log_mentions"):
        "an Ansible module reading the make.log root's DKMS wrote under /var/lib/dkms",
    ("ansible/roles/nvidia_driver/library/secure_boot_sources.py", "read", "read_variable"):
        "an Ansible module reading an EFI variable from efivarfs: the firmware's, via the kernel",
    ("ansible/roles/repo_trust/library/repo_trust_entries.py", "read", "read_files"):
        "an Ansible module reading root's own /etc/apt and /etc/yum.repos.d entries to edit them",
    ("scripts/tfhost/commands/run.py", "write", "run"):
        "removes the 0700 directory tempfile.mkdtemp made for this run a few lines above",
    ("ansible/filter_plugins/openpgp.py", "write", "gnupg_home"):
        "removes the throwaway GnuPG home tempfile.mkdtemp made for this filter call",
    # --- prints of fields that are not from another machine ---------------------------
    ("workloads/accept/output.py", "print", "print_table"):
        "the p2p matrix this host measured (NVML's link names); its labels go through _cell",
    ("workloads/check.py", "print", "run"):
        "the device name TensorFlow gives on this host, not a record's",
    ("workloads/check.py", "print", "_print"):
        "the GPU names and figures this host's TensorFlow gives, not a record's",
    ("workloads/style/bench.py", "print", "run"):
        "the device and backend this process ran on, not a record's",
    ("workloads/style/command.py", "print", "run"):
        "the device and backend this process ran on, not a record's",
}


def _key(finding: Finding) -> tuple[str, str, str]:
    return (finding.path, finding.rule, finding.function)


def test_nothing_writes_reads_or_prints_outside_the_choke_points() -> None:
    found = [f for f in scan(ROOT) if _key(f) not in ALLOWED]
    assert not found, "outside the choke points (route it through workloads/safefs.py, " \
        "bounded.py or printable.py, or allow it in ALLOWED with a reason):\n" + \
        "\n".join(map(str, found))


def test_every_allowance_gives_a_reason() -> None:
    assert all(len(why) > 20 for why in ALLOWED.values())


def test_every_allowance_is_still_used() -> None:
    """An entry whose code moved onto a choke point is stale: it would let the next one in."""
    used = {_key(f) for f in scan(ROOT)}
    assert not [key for key in ALLOWED if key not in used]


# --- the scanner itself: each rule on a family of snippets ----------------------------

FLAGGED = {
    "write": [
        'open(p, "w")', 'open(p, mode="a")', 'open(p, "r+")', 'io.open(p, "wb")',
        'os.fdopen(fd, "w")', 'p.open("w")', 'p.open(mode="x")', 'tarfile.open(p, "w:gz")',
        'gzip.open(p, "wb")', "os.open(p, os.O_WRONLY | os.O_CREAT)",
        "os.open(p, flags | os.O_RDWR)", 'p.write_text("x")', 'p.write_bytes(b"x")',
        "p.mkdir(parents=True)", "os.makedirs(p)", "os.mkdir(p)", "fig.savefig(p)",
        'fig.savefig("x.png", dpi=1)', "model.save(p)", "model.save(str(p))",
        "image.save(p)", "os.replace(a, b)", "shutil.copy(a, b)",
        "tempfile.mkstemp(dir=d)", "frame.to_csv(p)", "frame.to_pickle(p)",
        # the next variants (review of issue 48): aliases, partials, modes and flags in
        # variables, imports under other names, numpy/matplotlib/Path writers, the shell
        'o = open\no(p, "w")', 'functools.partial(open, mode="w")', "f = io.open",
        'builtins.open(p, "w")', 'm = "w"\nopen(p, m)', 'p.open(mode=m)',
        "fl = os.O_WRONLY | os.O_CREAT\nos.open(p, fl)", 'os.open(p, getattr(os, "O_WRONLY"))',
        "os.open(p, flags=fl)",
        "from os import open as o\no(p, os.O_WRONLY)", "from os import makedirs\nmakedirs(p)",
        "import numpy as xp\nxp.save(p, a)", "np.savez(p, a=a)", "np.savez_compressed(p, a=a)",
        "np.savetxt(p, a)", "a.tofile(p)", "plt.imsave(p, a)", "p.touch()", "p.symlink_to(q)",
        "os.symlink(a, b)", "os.link(a, b)", "os.truncate(p, 0)", "os.mkfifo(p)", "p.rename(q)",
        "p.replace(q)", "shutil.copytree(a, b)", "urllib.request.urlretrieve(u, p)",
        'subprocess.run(f"x > {p}", shell=True)',
        'os.sys' 'tem("x > y")',  # split: test_stdio bans that call's text in the tests
        'json.dump(obj, open(p, "w"))',
        # remove or change a file by name, and libraries that write by the name given later
        "shutil.rmtree(p)", "os.remove(p)", "os.unlink(p)", "p.unlink()", "os.rmdir(p)",
        "os.chmod(p, 0o777)", "p.chmod(0o777)", "os.chown(p, 0, 0)", "os.utime(p)",
        "tar.extractall(d)", "shutil.unpack_archive(a, d)", "model.save_weights(p)",
        "keras.callbacks.ModelCheckpoint(p)", "tf.keras.callbacks.CSVLogger(p)",
        "tf.keras.callbacks.TensorBoard(log_dir=d)", "tf.summary.create_file_writer(d)",
        "logging.FileHandler(p)", "logging.basicConfig(filename=p)", "tf.io.write_file(p, b)",
    ],
    "read": [
        "json.load(fh)", "yaml.safe_load(text)", "yaml.load(fh, Loader=L)", "pickle.load(fh)",
        "pickle.loads(data)", "csv.reader(fh)", "csv.DictReader(fh)", "np.load(p)",
        "pd.read_csv(p)", "p.read_text()", "p.read_bytes()",
        "from json import load\nload(fh)", "import yaml as y\ny.safe_load(t)", "yaml.compose(t)",
        "tomllib.load(fh)", "marshal.loads(b)", "np.fromfile(p)", "np.loadtxt(p)",
        "from PIL import Image\nImage.open(p)", "Image.open(p)",
        # a file opened by name to read, then decoded by anything (the next variants)
        "json.loads(open(p).read())", 'with path.open("rb") as s:\n    raw = s.read(1 << 26)',
        "np.frombuffer(p.open().read(), np.uint8)", 'io.open(p, "rb")',
        "configparser.ConfigParser().read_file(open(p))", "tarfile.open(p)",
        'gzip.open(p, "rt")', "zipfile.ZipFile(p)",
    ],
    "print": [
        # a sanitiser counts as resolved, never by its name alone
        "def _cell(v):\n    return str(v)\nprint(_cell(r.host))",
        "from workloads.errors import shorten\nprint(shorten(r.host, 9))",
        "print(printable.shorten(record['host'], 9))", "print(line(r.host))",
        "def clip(v):\n    return v.strip()\nprint(clip(r.reason))",
        "print(record['host'])", 'print(f"{h.host} failed")', "print(row.get('reason'))",
        "sys.stdout.write(v.error)", 'sys.stderr.write(f"{x.note}\\n")',
        "module.fail_json(msg=f\"{info.get('msg')}\")", "print('x', h.device, sep='')",
        'logging.info("%s", record["host"])', 'log.warning(record.get("reason"))',
        'logger.error(f"{r.reason}")', "click.echo(h.host)",
        # through local names, and through rich
        'def f(record):\n    host = record["host"]\n    print(host)',
        'def f(record):\n    host = record["host"]\n    label = f"{host}:"\n    print(label)',
        "def f(finding):\n    for reason in finding.reasons:\n        print(reason)",
        'def f(r):\n    if (name := r.get("host")):\n        print(name)',
        "console.print(r.reason)", "Console().print(h.host)", "table.add_row(h.host, 'x')",
        "table.add_column(r['device'])",
        "def f(r):\n    text = json.dumps(r['host'], ensure_ascii=False)\n    print(text)",
        # through a function's return value, and what else writes to the terminal
        "def label(r):\n    return f\"{r['host']}:\"\ndef f(r):\n    print(label(r))",
        "def a(r):\n    return r.reason\ndef b(r):\n    return a(r)\nprint(b(x))",
        "def f(r):\n    sys.exit(f\"bad host {r['host']}\")", "raise SystemExit(r.reason)",
        "parser.error(r.host)", "warnings.warn(r.reason)", "os.write(2, r.host.encode())",
        "sys.stdout.buffer.write(r.host.encode())", "rich.print(r.host)",
        "pprint.pprint(r['host'])", "tqdm.write(r.host)",
    ],
}
CLEAN = [
    'open("/proc/meminfo")', 'open("/proc/self/maps", "rb")', "os.open(p, os.O_RDONLY)",
    "webbrowser.open(url)", "opener.open(url, timeout=t)", "os.fdopen(fd, 'rb')",
    "tarfile.open(fileobj=stream, mode='r|')", "safefs.write_bytes(p, b'x')",
    "json.loads(text)", "print(printable.line(h.host))", 'print(f"{clip(r.reason)}")',
    "print(figures['read_s'])", "frame.to_csv()", "module.fail_json(msg=shown(info.get('msg')))",
    "with safefs.writing(p) as fh:\n    fig.savefig(fh, format='png')",
    "with safefs.staged(p) as name:\n    model.save(str(name))",
    "with (safefs.staged(p) if c else safefs.scratch(n)) as name:\n    model.save(str(name))",
    "def f():\n    buffer = io.BytesIO()\n    image.save(buffer, format='PNG')",
    "with safefs.writing(p) as fh, tarfile.open(fileobj=fh, mode='w:gz') as tar:\n    pass",
    "open: list[int] = []", 'os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))',
    "_R = os.O_RDONLY | os.O_NOFOLLOW\nos.open(p, _R)",
    'text.replace("a", "b")', "subprocess.run(cmd, shell=False)", "webbrowser.open(url)",
    'logging.info("%d runs", len(runs))', "log.info(printable.line(h.host))",
    'def f(record):\n    host = printable.line(record["host"])\n    print(host)',
    "def f(record):\n    print(json.dumps(record['host']))",
    "def _cell(t):\n    return printable.line(t)\ntable.add_row(_cell(h.host))",
    "console.print(printable.line(r.reason))", "def f(r):\n    n = r['count']\n    print(n)",
    "os.unlink(name, dir_fd=folder)", "shutil.rmtree(name, dir_fd=folder)", "os.write(fd, data)",
    "def label(r):\n    return printable.line(r['host'])\ndef f(r):\n    print(label(r))",
    "sys.exit(main())", "parser.error(f'--tree {spec!r}: want LABEL=PATH')",
]


# What a module imports to make text printable (a sanitiser counts only as resolved).
PRELUDE = ("from workloads import printable\nfrom workloads.errors import brief, clip\n"
           "from ansible.roles.repo_trust.library.repo_trust_fetch import shown\n")


def _rules(source: str) -> list[str]:
    source = PRELUDE + source
    tree = ast.parse(source)
    visitor = _Visitor("snippet.py", source.splitlines(), imported_names(tree),
                       module_constants(tree))
    visitor.visit(tree)
    return [f.rule for f in visitor.found]


@pytest.mark.parametrize(("rule", "source"),
                         [(rule, s) for rule, sources in FLAGGED.items() for s in sources])
def test_each_rule_flags_its_calls(rule: str, source: str) -> None:
    assert rule in _rules(source)


@pytest.mark.parametrize("source", CLEAN)
def test_what_goes_through_a_choke_point_is_not_flagged(source: str) -> None:
    assert _rules(source) == []


# --- the Ansible side of the printable rule ---------------------------------------------

@functools.cache
def _fetch_module() -> object:
    path = ROOT / "ansible/roles/repo_trust/library/repo_trust_fetch.py"
    spec = importlib.util.spec_from_file_location("repo_trust_fetch_for_choke_points", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@settings(max_examples=300)
@given(text=st.text(st.characters(exclude_categories=()), max_size=600), limit=st.integers(1, 300))
def test_the_key_fetch_shows_a_reason_as_workloads_printable_does(text: str, limit: int) -> None:
    """The module cannot import workloads; its copy of the rule must agree with the one."""
    from workloads import printable

    shown = _fetch_module().shown  # type: ignore[attr-defined]
    assert shown(text, limit) == printable.line(text, limit)
