"""Every refusal the code can raise is one line under 200 characters: found in the code itself.

The corpus is not typed by hand: the source of the ``workloads`` package and of the
host-side ``tfhost`` package is parsed, every class that derives from
``WorkloadError`` is found (``UnsafePath``, ``RunBusy``, ...), and every call that
builds one (``raise WorkloadError(...)``, a subclass, its ``super().__init__``,
and the message factories that return one) is measured: its text as written,
with each interpolated value counted as a path or name a user would type
(:data:`PLACEHOLDER` characters), after the longest prefix the CLI prints
(``workloads monitor: error: ``). A new refusal is in the corpus the day it is
written.

Then the guarantee for what no template can bound (a path of any length, a peer
list from SLURM, a label of 10**5000 digits): ``WorkloadError.one_line`` and
``brief`` keep any message one printable line under the limit, checked with
Hypothesis over the values a refusal may quote.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from workloads.errors import LINE_MAX, WorkloadError, brief, one_line

REPO = Path(__file__).resolve().parents[2]
SOURCES = [REPO / "workloads", REPO / "scripts" / "tfhost"]
LIMIT = 200
PREFIX = "workloads monitor: error: "  # the longest "workloads <command>: error: "
PLACEHOLDER = 30  # an interpolated path or name, as a user would type it
NUMBER = 12  # an interpolated count, mode, uid or other short value


@dataclass(frozen=True)
class Refusal:
    where: str
    length: int
    text: str


def _modules() -> list[tuple[Path, ast.Module]]:
    found = []
    for root in SOURCES:
        for path in sorted(root.rglob("*.py")):
            found.append((path, ast.parse(path.read_text(), str(path))))
    return found


def _name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def error_classes(modules: list[tuple[Path, ast.Module]]) -> set[str]:
    """WorkloadError and every class deriving from it, to a fixed point."""
    classes = {"WorkloadError"}
    changed = True
    while changed:
        changed = False
        for _, tree in modules:
            for node in ast.walk(tree):
                if (isinstance(node, ast.ClassDef) and node.name not in classes
                        and any(_name(base) in classes for base in node.bases)):
                    classes.add(node.name)
                    changed = True
    return classes


def factories(modules: list[tuple[Path, ast.Module]], classes: set[str]) -> set[str]:
    """Functions annotated to return one of the classes (``def fail(...) -> WorkloadError``)."""
    found = set()
    for _, tree in modules:
        for node in ast.walk(tree):
            if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
                    and node.returns is not None and _name(node.returns) in classes):
                found.add(node.name)
    return found


PATH_LIKE = re.compile(r"path|dir|url|file|dest|target|log|librar|spec|cache|parent|candidate|"
                       r"shown|given|image|weights|archive|above|where|name|node|peers|mirror",
                       re.IGNORECASE)


def _placeholder(node: ast.expr) -> str:
    """What an interpolated value may print: a path or name in full, a number in short.

    A value named like a path, file, URL or name counts as :data:`PLACEHOLDER`
    characters (a path as a user types it); any other value (a count, a mode, a
    uid) as :data:`NUMBER` characters.
    """
    source = ast.unparse(node)
    return "x" * (PLACEHOLDER if PATH_LIKE.search(source) else NUMBER)


def _text(node: ast.expr) -> str:
    """The message as written, each interpolated value a run of 'x' (see _placeholder)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(part.value) if isinstance(part, ast.Constant) else
                       _placeholder(part.value) if isinstance(part, ast.FormattedValue)
                       else "" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.IfExp):
        return max(_text(node.body), _text(node.orelse), key=len)
    return _placeholder(node)


def _is_super_init(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr == "__init__"
            and isinstance(func.value, ast.Call) and _name(func.value.func) == "super")


def refusals() -> list[Refusal]:
    modules = _modules()
    classes = error_classes(modules)
    makers = classes | factories(modules, classes)
    found = []
    for path, tree in modules:
        inside: dict[ast.AST, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for child in ast.walk(node):
                    inside.setdefault(child, node.name)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            named = _name(node.func) in makers
            own_init = _is_super_init(node) and inside.get(node) in classes
            if not (named or own_init):
                continue
            args = [arg for arg in node.args if not isinstance(arg, ast.Starred)]
            args += [kw.value for kw in node.keywords if kw.arg in ("problem", "fix", "reason")]
            if not args:
                continue
            text = "; ".join(_text(arg) for arg in args)
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            found.append(Refusal(where, len(PREFIX) + len(text), text))
    return found


def test_the_corpus_is_found_in_the_code() -> None:
    found = refusals()
    files = {refusal.where.split(":")[0] for refusal in found}
    assert len(found) > 150, len(found)
    for expected in ("workloads/netbind/address.py", "workloads/safefs.py",
                     "workloads/cifar10/data.py", "workloads/sweep/spec.py",
                     "workloads/style/weights.py", "scripts/tfhost/report.py"):
        assert expected in files, expected


def test_every_refusal_as_written_is_one_line_under_200_characters() -> None:
    too_long = [f"{r.where}: {r.length} characters: {r.text!r}"
                for r in refusals() if r.length >= LIMIT or "\n" in r.text]
    assert not too_long, "\n".join(too_long)


# --- Whatever a refusal quotes, it stays one line under the limit --------------------------

QUOTED = st.one_of(
    st.text(max_size=400),
    st.integers(min_value=-(10**6000), max_value=10**6000),
    st.builds(lambda digits: 10**digits, st.integers(0, 6000)),
    st.lists(st.text(max_size=80), max_size=20),
    st.tuples(st.integers(), st.integers(min_value=0, max_value=2**4096)),
    st.binary(max_size=200),
)


@settings(max_examples=200)
@given(quoted=st.lists(QUOTED, min_size=1, max_size=4), fix=st.text(max_size=300))
def test_any_quoted_value_leaves_one_line_under_the_limit(quoted: list[object], fix: str) -> None:
    problem = " and ".join(brief(value) for value in quoted)
    line = f"{PREFIX}{WorkloadError(problem, fix or None).one_line()}"
    assert "\n" not in line and "\r" not in line
    assert len(line) < LIMIT
    assert len(one_line(problem, fix)) <= LINE_MAX


def test_a_huge_integer_is_shown_by_its_size() -> None:
    assert brief(10**5000) == "<an integer of 16610 bits>"
    assert brief(-(10**30)) == "-<an integer of 100 bits>"
    assert brief((1, 10**5000)) == "(1, <an integer of 16610 bits>)"
    assert brief(12) == "12"
