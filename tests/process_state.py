"""Every change a test makes to state the whole pytest process shares, found in its source.

Why it matters: the background jobs (tests/support/background.py) run plays, stub
repositories and the private Docker engine from a worker thread of the same process
while the foreground tests run. Their children inherit the process's environment,
working directory and umask when they start, and the thread's own code reads
``tempfile.tempdir`` and the standard library's functions: whatever a foreground
test sets there for a moment, a background job may pick up (a play that ran with a
test's PATH, ``stubrpm-*`` directories made in a test's ``tempfile.tempdir``).

Used by ``tests/test_process_state.py`` (which fails on any finding it does not
allow) and runnable alone (``python -m tests.process_state [ROOT]``). It reads the
AST of ``tests/**/*.py``, so a change written in a child's program text (a string)
is not one. What it reports, by kind (:attr:`Finding.what`):

``env NAME``
    ``os.environ[NAME] = ...``, ``del os.environ[NAME]``, ``os.environ.pop(NAME)``,
    ``.setdefault``/``.__setitem__``/``.__delitem__``, ``os.environ.update(NAME=...)``
    or ``.update({NAME: ...})``, ``os.environ |= {NAME: ...}``, ``os.putenv``/
    ``os.unsetenv``, ``<anything>.setenv(NAME, ...)``/``.delenv(NAME)`` (a
    ``MonkeyPatch`` under any name) and ``<anything>.setitem(os.environ, NAME, ...)``/
    ``.delitem``, ``mock.patch.dict(os.environ, {NAME: ...})``. NAME is the variable's
    name where the source gives it as a string constant, a module constant of the same
    file, or a constant of a module of this repository (``netbind.MODE_ENV``); ``?``
    where it does not (a variable, an f-string, a loop's name).
``environ``
    a change to the whole environment: ``os.environ.clear()``/``.popitem()``,
    ``.update(mapping)`` or ``|=`` with anything but literal names, ``os.environ = ...``,
    ``patch.dict(os.environ, ..., clear=True)``.
``cwd``
    ``os.chdir``/``os.fchdir``, ``<anything>.chdir(...)`` (``monkeypatch.chdir``,
    ``contextlib.chdir``).
``tempfile``
    ``tempfile.tempdir = ...``, ``setattr(tempfile, ...)`` and ``<anything>.setattr``/
    ``.delattr`` of it (also by its dotted name, ``"tempfile.tempdir"``).
``umask``
    ``os.umask(...)``.
``setattr MODULE.NAME``
    ``setattr``/``<anything>.setattr``/``.delattr``/``mock.patch.object`` on a module or
    class of the standard library (``socket.getaddrinfo``, ``os.scandir``,
    ``subprocess.run``), or an assignment to one: every thread of the process calls
    those. (Patching a module's own view, ``monkeypatch.setattr(module, "socket", shim)``,
    changes one module of this repository and is not reported.)
``pytester``
    a test that takes the ``pytester``/``testdir`` fixture: it chdirs into its folder and
    sets HOME for the process while the test runs.

A finding is ``(path, line, what, source)``; the test's allow-list names ``(path, what)``.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.choke_points import import_map

ENVIRON = "os.environ"
STANDARD_LIBRARY = frozenset(sys.stdlib_module_names)
# where `import x.y` of this repository's modules is found, for their constants
SOURCE_ROOTS = ("", "scripts")
FIX = {
    "env": "give the child its own env= (subprocess.run(..., env={**os.environ, NAME: ...})), "
           "or patch the one module's lookup (a parameter, monkeypatch.setattr(module, ...))",
    "environ": "give the child its own env=, or patch the one module's lookup",
    "cwd": "pass cwd= to the child, or give the code paths under tmp_path",
    "tempfile": "pass dir=, or patch the one module's view "
                "(monkeypatch.setattr(module, \"tempfile\", shim))",
    "umask": "give the child its own: subprocess.run(..., umask=0o002)",
    "setattr": "patch the module's own view (monkeypatch.setattr(module, \"socket\", shim)), "
               "or pass the function in",
    "pytester": "run the inner pytest with subprocess.run(..., cwd=, env=) "
                "(pytester chdirs and sets HOME for the process)",
}
ENVIRON_ONE_NAME = {"pop", "setdefault", "__setitem__", "__delitem__"}
ENVIRON_WHOLE = {"clear", "popitem"}
FIXTURES_THAT_CHDIR = {"pytester", "testdir"}


@dataclass(frozen=True)
class Finding:
    path: str  # relative to the repository root
    line: int
    what: str  # "env PATH", "env ?", "environ", "cwd", "tempfile", "umask", "setattr os.x"
    source: str

    @property
    def fix(self) -> str:
        return FIX[self.what.split(" ")[0]]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}: {self.source} -- {self.fix}"


def imports(tree: ast.Module) -> dict[str, str]:
    """Every local name an import binds (anywhere in the file), to its dotted name."""
    return import_map(tree, "")


def _string_constants(tree: ast.Module) -> dict[str, str]:
    return {target.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for target in node.targets if isinstance(target, ast.Name)}


class Constants:
    """String constants of this repository's modules, by dotted module name (read once)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._modules: dict[str, tuple[dict[str, str], dict[str, str]] | None] = {}

    def _source(self, module: str) -> Path | None:
        relative = Path(*module.split("."))
        for base in SOURCE_ROOTS:
            for path in (self.root / base / relative.with_suffix(".py"),
                         self.root / base / relative / "__init__.py"):
                if path.is_file():
                    return path
        return None

    def _load(self, module: str) -> tuple[dict[str, str], dict[str, str]] | None:
        if module not in self._modules:
            path = self._source(module)
            if path is None:
                self._modules[module] = None
            else:
                tree = ast.parse(path.read_text(encoding="utf-8"))
                package = module if path.name == "__init__.py" else module.rpartition(".")[0]
                imported = {}
                for node in tree.body:
                    if isinstance(node, ast.ImportFrom):
                        base = package
                        for _ in range(max(node.level - 1, 0)):
                            base = base.rpartition(".")[0]
                        source = (f"{base}.{node.module}" if node.level and node.module
                                  else base if node.level else node.module or "")
                        for alias in node.names:
                            imported[alias.asname or alias.name] = f"{source}.{alias.name}"
                self._modules[module] = (_string_constants(tree), imported)
        return self._modules[module]

    def value(self, dotted: str, depth: int = 0) -> str | None:
        """The string `module.NAME` is bound to, following `from .x import NAME`."""
        module, _, name = dotted.rpartition(".")
        loaded = self._load(module) if module and depth < 4 else None
        if loaded is None:
            return None
        constants, imported = loaded
        if name in constants:
            return constants[name]
        return self.value(imported[name], depth + 1) if name in imported else None


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str, source: str, constants: Constants) -> None:
        self.path = path
        self.lines = source.splitlines()
        self.tree = ast.parse(source, filename=path)
        self.imports = imports(self.tree)
        self.own = _string_constants(self.tree)
        self.constants = constants
        self.found: list[Finding] = []

    def run(self) -> list[Finding]:
        self.visit(self.tree)
        return self.found

    # --- what the source names --------------------------------------------------------

    def dotted(self, node: ast.AST) -> str | None:
        """`node` as the dotted name it stands for, when it starts at an imported name."""
        if isinstance(node, ast.Name):
            return self.imports.get(node.id)
        if isinstance(node, ast.Attribute):
            owner = self.dotted(node.value)
            return f"{owner}.{node.attr}" if owner else None
        return None

    def is_environ(self, node: ast.AST) -> bool:
        return self.dotted(node) == ENVIRON or (
            isinstance(node, ast.Constant) and node.value == ENVIRON)

    def name(self, node: ast.AST | None) -> str:
        """An environment variable's name as the source gives it, else ``?``."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.own:
            return self.own[node.id]
        dotted = self.dotted(node) if node is not None else None
        if dotted:
            value = self.constants.value(dotted)
            if value is not None:
                return value
        return "?"

    def names_in(self, mapping: ast.AST | None) -> list[str] | None:
        """The names of a dict display (``{NAME: ...}``), or None when it is not one."""
        if isinstance(mapping, ast.Dict) and None not in mapping.keys:
            return [self.name(key) for key in mapping.keys]
        return None

    # --- reporting ---------------------------------------------------------------------

    def flag(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        source = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        self.found.append(Finding(self.path, line, what, source))

    def flag_env(self, node: ast.AST, names: list[str] | None) -> None:
        if names is None:
            self.flag(node, "environ")
        for name in names or []:
            self.flag(node, f"env {name}")

    def flag_patched(self, node: ast.AST, target: str | None, attribute: str | None) -> None:
        """A patch of `target` (a dotted name): reported when it is the standard library's."""
        if not target or target.split(".")[0] not in STANDARD_LIBRARY:
            return
        whole = f"{target}.{attribute}" if attribute else target
        if whole == ENVIRON or whole.startswith(ENVIRON + "."):
            self.flag(node, "environ")
        elif target == "tempfile" or target.startswith("tempfile."):
            self.flag(node, "tempfile")
        else:
            self.flag(node, f"setattr {whole}")

    # --- the forms ---------------------------------------------------------------------

    def _assigned(self, node: ast.AST, target: ast.AST, value: ast.AST | None) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._assigned(node, element, None)
        elif isinstance(target, ast.Subscript) and self.is_environ(target.value):
            self.flag(node, f"env {self.name(target.slice)}")
        elif self.is_environ(target):
            names = self.names_in(value) if isinstance(node, ast.AugAssign) else None
            self.flag_env(node, names)
        elif isinstance(target, ast.Attribute):
            self.flag_patched(node, self.dotted(target.value), target.attr)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._assigned(node, target, node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._assigned(node, node.target, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._assigned(node, node.target, node.value)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._assigned(node, target, None)
        self.generic_visit(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        arguments = node.args
        for argument in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]:
            if argument.arg in FIXTURES_THAT_CHDIR:
                self.flag(node, "pytester")
        self.generic_visit(node)

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Call(self, node: ast.Call) -> None:
        self._call(node)
        self.generic_visit(node)

    def _call(self, node: ast.Call) -> None:
        func, args = node.func, node.args
        first = args[0] if args else None
        called = self.dotted(func)
        method = func.attr if isinstance(func, ast.Attribute) else None
        keywords = {k.arg: k.value for k in node.keywords if k.arg}
        if called in ("os.putenv", "os.unsetenv"):
            self.flag(node, f"env {self.name(first)}")
        elif called in ("os.chdir", "os.fchdir") or method == "chdir" or (
                called is not None and called.endswith(".chdir")):
            self.flag(node, "cwd")
        elif called == "os.umask":
            self.flag(node, "umask")
        elif isinstance(func, ast.Attribute) and self.is_environ(func.value):
            self._environ_method(node, func.attr)
        elif method in ("setenv", "delenv"):
            self.flag(node, f"env {self.name(first if first else keywords.get('name'))}")
        elif method in ("setitem", "delitem") and first is not None and self.is_environ(first):
            self.flag(node, f"env {self.name(args[1] if len(args) > 1 else None)}")
        elif method == "dict" and first is not None and self.is_environ(first):
            clear = keywords.get("clear")
            whole = clear is not None and (
                not isinstance(clear, ast.Constant) or bool(clear.value))
            given = self.names_in(args[1]) if len(args) > 1 else []
            named = [*(given or []), *(k.arg for k in node.keywords
                                       if k.arg and k.arg not in ("clear", "values"))]
            self.flag_env(node, None if whole or given is None else named)
        elif (isinstance(func, ast.Name) and func.id in ("setattr", "delattr")
              and func.id not in self.imports) or method in ("setattr", "delattr", "object"):
            self._setattr(node, first, args[1] if len(args) > 1 else None)
        elif called is not None and called.endswith("mock.patch"):
            self._setattr(node, first, None)

    def _environ_method(self, node: ast.Call, method: str) -> None:
        args = node.args
        if method in ENVIRON_ONE_NAME:
            self.flag(node, f"env {self.name(args[0] if args else None)}")
        elif method in ENVIRON_WHOLE:
            self.flag(node, "environ")
        elif method in ("update", "__ior__"):
            names: list[str] | None = [k.arg for k in node.keywords if k.arg]
            if any(k.arg is None for k in node.keywords):
                names = None
            for positional in args:
                given = self.names_in(positional)
                names = None if given is None or names is None else [*names, *given]
            self.flag_env(node, names)

    def _setattr(self, node: ast.Call, target: ast.AST | None, attribute: ast.AST | None) -> None:
        if isinstance(target, ast.Constant) and isinstance(target.value, str):
            owner, _, name = target.value.rpartition(".")  # monkeypatch.setattr("os.x", v)
            self.flag_patched(node, owner or None, name)
            return
        attribute_name = attribute.value if isinstance(attribute, ast.Constant) and isinstance(
            attribute.value, str) else None
        self.flag_patched(node, self.dotted(target) if target is not None else None,
                          attribute_name)


def scan_source(path: str, source: str, constants: Constants) -> list[Finding]:
    return _Visitor(path, source, constants).run()


def python_files(root: Path) -> Iterator[Path]:
    yield from sorted((root / "tests").rglob("*.py"))


def scan(root: Path) -> list[Finding]:
    """Every change to the process's shared state in the tests of the tree at `root`."""
    constants = Constants(root)
    found: list[Finding] = []
    for path in python_files(root):
        found += scan_source(path.relative_to(root).as_posix(),
                             path.read_text(encoding="utf-8"), constants)
    return found


if __name__ == "__main__":
    for finding in scan(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(finding)
