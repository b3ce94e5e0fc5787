"""Every file write, untrusted read and raw print in a tree's source, outside the choke points.

Used by ``tests/test_choke_points.py`` (which fails on any finding not allowed there,
with a reason) and runnable alone (``python -m tests.choke_points [ROOT]``) to list
what a tree holds. What it flags, by rule, is what the three choke points exist for:

write (only ``workloads/safefs.py`` writes files)
    ``open``/``io.open``/``os.fdopen``/``Path.open``/``tarfile.open``/``gzip.open`` with a
    mode holding ``w``, ``a``, ``x`` or ``+``; ``os.open`` whose flags name ``O_WRONLY``,
    ``O_RDWR``, ``O_CREAT``, ``O_APPEND`` or ``O_TRUNC``; ``.write_text``/``.write_bytes``
    (but ``safefs.``'s own); ``mkdir``/``makedirs``; ``os.replace``/``os.rename``/
    ``shutil.copy*``/``shutil.move``; ``tempfile.mkstemp``/``NamedTemporaryFile``;
    removing or changing a file by name (``unlink``, ``rmdir``, ``shutil.rmtree``,
    ``chmod``, ``chown``, ``utime``, ``extractall``, ``unpack_archive``) unless relative
    to a checked directory (``dir_fd=``); libraries given a name to write to later
    (Keras' ``ModelCheckpoint``/``CSVLogger``/``TensorBoard``, ``save_weights``,
    ``tf.summary.create_file_writer``, logging's ``FileHandler``/``basicConfig(filename=)``);
    pandas' ``.to_csv``/``.to_json``/``.to_pickle`` given a target; and ``savefig`` or
    ``.save`` unless their first argument (``str()`` of it included) is a name bound
    by ``with safefs.<function>(...) as NAME`` around the call or assigned from
    ``io.BytesIO()`` in the same function (a library writing into memory, or into a
    file or a private name that safefs then places).
read (only ``workloads/bounded.py`` and ``workloads/pickle_walk.py`` decode untrusted bytes)
    ``json.load``, ``yaml.load``/``safe_load``/``full_load``/``unsafe_load``/
    ``load_all``/``safe_load_all``, ``pickle.load``/``loads``, ``csv.reader``/
    ``DictReader``, ``numpy.load``, ``pandas.read_csv``/``read_json``/``read_pickle``,
    ``Path.read_text``/``read_bytes``; and a file opened by a name that is not a literal
    to read (``open(p)``, ``path.open("rb")``, ``io.open``, ``tarfile.open(p)``,
    ``gzip.open(p)``, ``zipfile.ZipFile(p)``): what it reads then reaches any decoder
    (``json.loads``, ``np.frombuffer``, ``configparser``), through a link or a FIFO and
    with no cap, so it is read by ``bounded`` instead (``open("/proc/meminfo")`` passes).
print (only ``workloads/printable.py`` makes record text printable)
    ``print``, ``sys.stdout.write``/``sys.stderr.write`` and ``module.fail_json``/
    ``warn`` whose argument holds a record field: a subscript by such a name
    (``record["host"]``), a ``.get("reason")``, or an attribute named as a record's
    fields are (:data:`RECORD_FIELDS`: ``host``, ``reason``, ``error``, ``device``, ...),
    not wrapped in a call that makes it printable (``printable.line``, ``clip``,
    ``brief``, ``one_line``, ``shown``, ``json.dumps`` with its default ``ensure_ascii``);
    a local name bound from such a field (``host = record["host"]``, ``for reason in
    f.reasons``, ``label = f"{host}:"``) holds it too. rich's ``Console.print`` and a
    table's ``add_row``/``add_column`` print as well (rich passes ESC through and reads
    ``[...]`` in a string as markup). So do ``sys.exit``/``SystemExit`` (to stderr),
    argparse's ``parser.error``, ``warnings.warn``, ``os.write(1|2, ...)``, the
    ``.buffer`` of stdout and stderr, ``rich.print``, ``pprint`` and ``tqdm.write``; and a
    call of a function of the same module that returns such a field raw
    (:func:`returning_fields`) holds it as the field does.

A finding is ``(path, rule, function, line, source)``; the allow-list in the test
names ``(path, rule, function)``, so a line moving does not break it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CHOKE_POINTS = {
    "write": {"workloads/safefs.py"},
    "read": {"workloads/bounded.py", "workloads/pickle_walk.py"},
    "print": {"workloads/printable.py"},
}

WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}
OPEN_MODE_SECOND = {"open", "io.open", "os.fdopen", "tarfile.open", "gzip.open", "bz2.open",
                    "lzma.open", "codecs.open", "zipfile.ZipFile"}
PLACING = {"os.replace", "os.rename", "shutil.copy", "shutil.copy2", "shutil.copyfile",
           "shutil.move", "tempfile.mkstemp", "tempfile.NamedTemporaryFile", "os.makedirs",
           "os.mkdir", "os.symlink", "os.link", "os.truncate", "os.mkfifo", "os.mknod",
           "shutil.copytree", "urllib.request.urlretrieve", "sqlite3.connect", "os.system",
           "os.popen", "np.save", "np.savez", "np.savez_compressed", "np.savetxt", "plt.imsave"}
# methods that make or change a file by name whatever their owner is called
WRITE_METHODS = {"mkdir", "makedirs", "touch", "symlink_to", "hardlink_to", "rename", "tofile",
                 "savez", "savez_compressed", "savetxt", "imsave",
                 # remove or change a file by name: through a planted link on the way to it
                 "unlink", "rmdir", "chmod", "lchmod", "extractall", "save_weights",
                 # libraries that open a file by the name they are given, later
                 "ModelCheckpoint", "BackupAndRestore", "CSVLogger", "TensorBoard",
                 "create_file_writer", "FileHandler", "RotatingFileHandler",
                 "TimedRotatingFileHandler", "WatchedFileHandler"}
# ... and functions that do, by their module's name
REMOVING = {"shutil.rmtree", "os.remove", "os.unlink", "os.rmdir", "os.removedirs", "os.chmod",
            "os.chown", "os.lchown", "os.utime", "shutil.chown", "shutil.unpack_archive",
            "shutil.make_archive", "tf.io.write_file", "tf.io.gfile.makedirs"}
READERS = {"json.load", "yaml.load", "yaml.safe_load", "yaml.full_load", "yaml.unsafe_load",
           "yaml.load_all", "yaml.safe_load_all", "pickle.load", "pickle.loads", "csv.reader",
           "csv.DictReader", "np.load", "numpy.load", "pd.read_csv", "pd.read_json",
           "pd.read_pickle", "pandas.read_csv", "pandas.read_json", "pandas.read_pickle",
           "yaml.compose", "yaml.compose_all", "yaml.parse", "yaml.scan", "tomllib.load",
           "tomllib.loads", "marshal.load", "marshal.loads", "np.fromfile", "np.loadtxt",
           "np.genfromtxt", "np.memmap", "PIL.Image.open", "Image.open"}
# a name imported from one of these modules is read as ``module.name`` (``from json import
# load`` is ``json.load``; ``import numpy as xp`` makes ``xp.load`` ``np.load``)
CANONICAL = {"numpy": "np", "pandas": "pd", "matplotlib.pyplot": "plt"}
RESOLVED = {"os", "os.path", "io", "json", "yaml", "pickle", "csv", "shutil", "tempfile", "gzip",
            "tarfile", "bz2", "lzma", "codecs", "zipfile", "numpy", "pandas", "subprocess",
            "logging", "marshal", "tomllib", "builtins", "sqlite3", "urllib.request", "PIL",
            "matplotlib.pyplot"}
OPENERS = {"open", "io.open", "os.open", "builtins.open", "os.fdopen", "pathlib.Path.open"}
LOG_CALLS = {"debug", "info", "warning", "error", "critical", "exception", "log"}
RECORD_FIELDS = {"host", "hostname", "reason", "reasons", "error", "group", "note", "msg",
                 "message", "device", "item", "detail", "details"}
# what prints its argument (or, SystemExit and sys.exit, writes it to stderr on the way out)
PRINTERS = {"print", "sys.exit", "SystemExit", "exit", "quit", "pprint.pprint", "pprint.pp",
            "rich.print", "typer.echo", "tqdm.write", "tqdm.tqdm.write", "warnings.warn",
            "sys.stdout.buffer.write", "sys.stderr.buffer.write"}
# The functions that make untrusted text printable, by where they are defined (a call is
# resolved through the module's imports, never trusted by its name alone: a ``_cell`` that
# returns ``str(value)`` is no sanitiser). A module's own function whose every non-constant
# return goes through one of these is one too (:func:`sanitizing_calls`).
SANITIZERS = {
    "workloads.printable.line",
    "workloads.errors.printable", "workloads.errors.one_line", "workloads.errors.clip",
    "workloads.errors.brief",  # repr() of the text: every non-printable character escaped
}
# Escapers in code that runs where workloads cannot be imported, each held to printable's rule.
SELF_CONTAINED_SANITIZERS = {
    "ansible.roles.repo_trust.library.repo_trust_fetch.shown":
        "an Ansible module runs alone on the host; tests/test_choke_points.py holds it equal "
        "to workloads.printable.line",
    "ansible.filter_plugins.openpgp.line":
        "a filter plugin runs in the controller's Ansible; every non-printable character "
        "becomes '?' (tests/ansible/test_openpgp_filter.py)",
}
SCOPES = ("workloads", "scripts", "ansible/filter_plugins", "ansible/library")


@dataclass(frozen=True)
class Finding:
    path: str
    rule: str
    function: str
    line: int
    source: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line} [{self.rule}] in {self.function}: {self.source}"


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a name or attribute chain; ``""`` for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = dotted(node.value)
        return f"{owner}.{node.attr}" if owner else f"?.{node.attr}"
    if isinstance(node, ast.Call):
        inner = dotted(node.func)
        return f"{inner}()" if inner else ""
    return ""


_UNKNOWN = "?w"  # a mode that is not a literal: it may write, so it is read as writing


def _mode(call: ast.Call, position: int | None) -> str | None:
    """The literal mode of an ``open``-like call, None if none is given, :data:`_UNKNOWN` if
    one is given that is not a literal (``open(p, mode)``). ``position`` None: keyword only."""
    for keyword in call.keywords:
        if keyword.arg == "mode":
            value = keyword.value
            return str(value.value) if isinstance(value, ast.Constant) else _UNKNOWN
    given = call.args[position] if position is not None and len(call.args) > position else None
    if given is None:
        return None
    return str(given.value) if isinstance(given, ast.Constant) else _UNKNOWN


def _writes(mode: str | None) -> bool:
    return mode is not None and any(c in mode for c in "wax+")


def imported_names(tree: ast.AST) -> dict[str, str]:
    """Local names bound by imports of :data:`RESOLVED` modules, to their dotted names."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in RESOLVED and not node.level:
            module = CANONICAL.get(node.module, node.module)
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                names[alias.asname or alias.name] = CANONICAL.get(full, f"{module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in RESOLVED:
                    names[alias.asname] = CANONICAL.get(alias.name, alias.name)
    return names


def module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Module-level ``NAME = expression``: what ``os.open(p, NAME)`` stands for."""
    return {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def _names(node: ast.AST) -> set[str]:
    return {n.attr if isinstance(n, ast.Attribute) else n.id
            for n in ast.walk(node) if isinstance(n, ast.Name | ast.Attribute)}


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, lines: list[str], imports: dict[str, str] | None = None,
                 constants: dict[str, ast.expr] | None = None) -> None:
        self.path = path
        self.module = module_name(path)
        self.clean: frozenset[str] = frozenset()  # the callees that sanitise, as spelled here
        self.imports = imports or {}
        self.constants = constants or {}
        self.called: set[int] = set()  # ids of the nodes that are some call's callee
        self.lines = lines
        self.found: list[Finding] = []
        self.functions: list[str] = ["<module>"]
        self.placed: list[set[str]] = [set()]  # names a safefs with-block or BytesIO gives
        self.tainted: list[set[str]] = [set()]  # local names that hold a record field

    def _flag(self, rule: str, node: ast.AST) -> None:
        line = getattr(node, "lineno", 0)
        source = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(self.path, rule, self.functions[-1], line, source[:120]))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.functions.append(node.name if self.functions[-1] == "<module>"
                              else f"{self.functions[-1]}.{node.name}")
        memory = {t.id for n in ast.walk(node) if isinstance(n, ast.Assign)
                  and isinstance(n.value, ast.Call) and dotted(n.value.func).endswith("BytesIO")
                  for t in n.targets if isinstance(t, ast.Name)}
        self.placed.append(self.placed[-1] | memory)
        self.tainted.append(tainted_names(node, self.tainted[-1], self.clean))
        self.generic_visit(node)
        self.tainted.pop()
        self.placed.pop()
        self.functions.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Module(self, node: ast.Module) -> None:
        self.clean = sanitizing_calls(node, self.module)
        self.tainted[0] = self.tainted[0] | returning_fields(node, self.clean)
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.functions.append(node.name)
        self.generic_visit(node)
        self.functions.pop()

    def _with(self, node: ast.With | ast.AsyncWith) -> None:
        bound = set()
        for item in node.items:
            name = dotted(item.context_expr.func) if isinstance(item.context_expr, ast.Call) else ""
            if name.startswith("safefs.") and isinstance(item.optional_vars, ast.Name):
                bound.add(item.optional_vars.id)
            choice = item.context_expr
            if isinstance(item.optional_vars, ast.Name) and isinstance(choice, ast.IfExp):
                branches = (choice.body, choice.orelse)
                if all(isinstance(b, ast.Call) and dotted(b.func).startswith("safefs.")
                       for b in branches):
                    bound.add(item.optional_vars.id)
        self.placed.append(self.placed[-1] | bound)
        self.generic_visit(node)
        self.placed.pop()

    visit_With = _with
    visit_AsyncWith = _with

    def _resolved(self, node: ast.AST) -> str:
        name = dotted(node)
        head, dot, rest = name.partition(".")
        return self.imports[head] + dot + rest if head in self.imports else name

    def _as_value(self, node: ast.Name | ast.Attribute) -> None:
        """``open`` not called but passed on (``o = open``, ``partial(open, mode="w")``)."""
        passed = isinstance(node.ctx, ast.Load) and id(node) not in self.called
        if passed and self._resolved(node) in OPENERS:
            self._flag("write", node)

    def visit_Name(self, node: ast.Name) -> None:
        self._as_value(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._as_value(node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        self.called.add(id(node.func))
        name = self._resolved(node.func)
        if name.startswith("builtins."):
            name = name.removeprefix("builtins.")
        attr = node.func.attr if isinstance(node.func, ast.Attribute) else name
        self._write_rules(node, name, attr)
        self._read_rules(node, name, attr)
        self._print_rules(node, name, attr)
        self.generic_visit(node)

    def _write_rules(self, node: ast.Call, name: str, attr: str) -> None:
        if name in OPEN_MODE_SECOND:
            into = [k.value for k in node.keywords if k.arg == "fileobj"]
            placed = bool(into) and all(isinstance(v, ast.Name) and v.id in self.placed[-1]
                                        for v in into)
            flagged = _writes(_mode(node, 1)) and not placed
        elif attr == "open" and name != "os.open" and not name.startswith("safefs."):
            # Path.open(mode); Image.open(path) has no mode, so a name first is not one
            first = node.args[0] if node.args else None
            flagged = _writes(_mode(node, 0 if isinstance(first, ast.Constant) else None))
        elif name == "os.open":
            flags = node.args[1] if len(node.args) > 1 else next(
                (k.value for k in node.keywords if k.arg == "flags"), None)
            names = _names(flags) if flags is not None else set()
            if flags is not None:  # getattr(os, "O_CLOEXEC", 0): the name is the string
                names |= {n.value for n in ast.walk(flags) if isinstance(n, ast.Constant)
                          and isinstance(n.value, str)}
                names -= {"getattr"}
            for constant in names & self.constants.keys():  # os.open(p, _READ_FLAGS)
                names = (names - {constant}) | _names(self.constants[constant])
            # flags held in a variable may hold anything: only literal O_ names pass
            flagged = bool(names & WRITE_FLAGS) or any(
                n != "os" and not n.startswith("O_") for n in names)
        elif name.startswith("subprocess.") and any(
                k.arg == "shell" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                for k in node.keywords):
            flagged = True  # a shell can redirect into any name (``>``)
        elif attr == "replace" and len(node.args) == 1 and not node.keywords:
            flagged = True  # Path.replace(target); str.replace takes two
        elif attr in ("write_text", "write_bytes"):
            flagged = not name.startswith("safefs.")
        elif attr in ("to_csv", "to_json", "to_pickle"):
            flagged = isinstance(node.func, ast.Attribute) and bool(node.args or any(
                k.arg in ("path_or_buf", "path") for k in node.keywords))
        elif attr in ("savefig", "save"):
            target = node.args[0] if node.args else None
            if isinstance(target, ast.Call) and dotted(target.func) == "str" and target.args:
                target = target.args[0]
            flagged = not (isinstance(target, ast.Name) and target.id in self.placed[-1])
        elif attr == "basicConfig":
            flagged = any(k.arg == "filename" for k in node.keywords)
        elif name in REMOVING or attr in ("unlink", "rmdir", "chmod"):
            # relative to a directory descriptor checked before (dir_fd=): no link on the way
            flagged = not any(k.arg == "dir_fd" for k in node.keywords)
        else:
            flagged = attr in WRITE_METHODS or name in PLACING
        if flagged:
            self._flag("write", node)

    def _read_rules(self, node: ast.Call, name: str, attr: str) -> None:
        if name in READERS or attr in ("read_text", "read_bytes") or self._opens_to_read(node, name,
                                                                                         attr):
            self._flag("read", node)

    @staticmethod
    def _opens_to_read(node: ast.Call, name: str, attr: str) -> bool:
        """``open(p)``, ``path.open("rb")``, ``tarfile.open(p)``: a file opened by a name that
        is not a literal, to read (its bytes then go to whatever decoder, bounded or not)."""
        if name in OPEN_MODE_SECOND and name not in ("os.fdopen",):
            given = node.args[0] if node.args else next(
                (k.value for k in node.keywords if k.arg in ("file", "name", "filename")), None)
            return given is not None and not isinstance(given, ast.Constant) \
                and not _writes(_mode(node, 1))
        if attr != "open" or name in ("os.open",) or name.startswith("safefs."):
            return False
        # Path.open(mode): no argument, or a literal read mode first (webbrowser.open(url),
        # opener.open(url) and Image.open(path) take a name first)
        first = node.args[0] if node.args else None
        mode = _mode(node, 0 if isinstance(first, ast.Constant) else None)
        if first is not None and not isinstance(first, ast.Constant):
            return False
        return not _writes(mode) and (mode is None or set(mode) <= set("rbt"))

    def _print_rules(self, node: ast.Call, name: str, attr: str) -> None:
        owner = name.rsplit(".", 1)[0].rsplit(".", 1)[-1].lower() if "." in name else ""
        printing = (name in PRINTERS or name in ("sys.stdout.write", "sys.stderr.write",
                                                 "click.echo", "click.secho")
                    or (name == "os.write" and node.args and isinstance(node.args[0], ast.Constant)
                        and node.args[0].value in (1, 2))
                    or attr in ("fail_json", "warn")
                    # rich passes ESC through and reads "[...]" as markup
                    or (attr == "print" and "console" in owner.lower())
                    or attr in ("add_row", "add_column")
                    or (attr == "error" and "parser" in owner)  # argparse: to stderr, exit 2
                    or (attr in LOG_CALLS and ("log" in owner or name.startswith("logging."))))
        if not printing:
            return
        values = list(node.args) + [k.value for k in node.keywords
                                    if k.arg not in ("file", "end", "sep", "flush")]
        if any(_raw_field(value, self.tainted[-1], self.clean) for value in values):
            self._flag("print", node)


def _targets(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr]]:
    """(target, value) of each binding in ``node``: assignments, loops, walrus, comprehensions."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign):
            for target in sub.targets:
                yield target, sub.value
        elif isinstance(sub, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and sub.value:
            yield sub.target, sub.value
        elif isinstance(sub, ast.For | ast.AsyncFor | ast.comprehension):
            yield sub.target, sub.iter


def tainted_names(function: ast.AST, outer: set[str],
                  clean: frozenset[str] = frozenset()) -> set[str]:
    """The local names of ``function`` that hold a record field's text: bound from a raw
    field (``host = record["host"]``, ``for reason in finding.reasons``) or from another such
    name (``label = f"{host}:"``), to a fixed point; a name bound from a sanitising call
    (``host = printable.line(record["host"])``) stays clean."""
    tainted = set(outer)
    while True:
        grown = set(tainted)
        for target, value in _targets(function):
            if _raw_field(value, tainted, clean):
                grown |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        if grown == tainted:
            return tainted
        tainted = grown


def returning_fields(module: ast.Module, clean: frozenset[str] = frozenset()) -> set[str]:
    """``name()`` for each function of ``module`` that returns a record field's text raw
    (``def label(r): return f"{r.host}:"``), to a fixed point (one returning another's
    result): a call of it holds the field as the field itself would."""
    functions = [n for n in ast.walk(module)
                 if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    returning: set[str] = set()
    while True:
        grown = set(returning)
        for function in functions:
            local = tainted_names(function, returning, clean)
            if any(isinstance(n, ast.Return) and n.value is not None
                   and _raw_field(n.value, local, clean)
                   for n in ast.walk(function)):
                grown.add(f"{function.name}()")
        if grown == returning:
            return returning
        returning = grown


def _raw_field(node: ast.AST, tainted: set[str] = frozenset(),  # type: ignore[assignment]
               clean: frozenset[str] = frozenset()) -> bool:
    """Does ``node`` hold a record field (or a local name holding one, or the result of a
    function returning one: ``name()`` in ``tainted``) that no sanitising call wraps?"""
    if isinstance(node, ast.Name) and node.id in tainted:
        return True
    if isinstance(node, ast.Call):
        if dotted(node.func) in clean:
            return False
        callee = dotted(node.func).rsplit(".", 1)[-1]
        if f"{callee}()" in tainted:
            return True
        if callee == "dumps" and not any(k.arg == "ensure_ascii" for k in node.keywords):
            return False  # JSON escapes every control character and (ensure_ascii) all past ~
        if callee == "get" and node.args and isinstance(node.args[0], ast.Constant) \
                and node.args[0].value in RECORD_FIELDS:
            return True
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
            and node.slice.value in RECORD_FIELDS:
        return True
    if isinstance(node, ast.Attribute) and node.attr in RECORD_FIELDS:
        return True
    return any(_raw_field(child, tainted, clean) for child in ast.iter_child_nodes(node))


def module_name(path: str) -> str:
    """``workloads/fleet/render_text.py`` → ``workloads.fleet.render_text``."""
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


def import_map(tree: ast.Module, module: str) -> dict[str, str]:
    """Each name an import binds in ``module`` (dotted, ``workloads.fleet.render``) to what it
    names: ``from workloads import printable`` → ``printable: workloads.printable``."""
    names: dict[str, str] = {}
    package = module.rsplit(".", 1)[0] if "." in module else ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    head = alias.name.split(".")[0]
                    names[head] = head
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
    return names


def sanitizing_calls(tree: ast.Module, module: str) -> frozenset[str]:
    """The callees, as this module spells them (``printable.line``, ``clip``, ``_cell``), that
    resolve to a sanitiser: one of :data:`SANITIZERS` or :data:`SELF_CONTAINED_SANITIZERS`, or a
    function of this module whose every non-constant ``return`` holds a call of one (to a
    fixed point: a wrapper of a wrapper)."""
    imports = import_map(tree, module)
    local = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}

    def resolved(spelling: str) -> str:
        head, dot, rest = spelling.partition(".")
        if head in local:  # a def binds after the imports above it
            return f"{module}.{spelling}"
        return imports[head] + dot + rest if head in imports else spelling

    known = SANITIZERS | set(SELF_CONTAINED_SANITIZERS)
    spellings = {dotted(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)} - {""}
    while True:
        clean = frozenset(s for s in spellings if resolved(s) in known)
        grown = set(known)
        for function in tree.body:
            if not isinstance(function, ast.FunctionDef):
                continue
            returns = [n.value for n in ast.walk(function) if isinstance(n, ast.Return)
                       and n.value is not None and not isinstance(n.value, ast.Constant)]
            if returns and all(any(isinstance(c, ast.Call) and dotted(c.func) in clean
                                   for c in ast.walk(value)) for value in returns):
                grown.add(f"{module}.{function.name}")
        if grown == known:
            return clean
        known = grown


def python_files(root: Path) -> Iterator[Path]:
    """The files the rules apply to: workloads/, scripts/, the Ansible modules and filters."""
    for scope in SCOPES:
        yield from sorted((root / scope).rglob("*.py"))
    yield from sorted(root.glob("ansible/roles/*/library/*.py"))


def scan(root: Path) -> list[Finding]:
    """Every finding in the tree at ``root``, choke-point modules left out for their own rule."""
    found: list[Finding] = []
    for path in python_files(root):
        relative = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, filename=relative)
        visitor = _Visitor(relative, text.splitlines(), imported_names(tree),
                           module_constants(tree))
        visitor.visit(tree)
        found += [f for f in visitor.found if relative not in CHOKE_POINTS[f.rule]]
    return found


if __name__ == "__main__":
    for finding in scan(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(finding)
