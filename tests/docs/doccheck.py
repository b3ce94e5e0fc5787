"""Read the project's Markdown as a user would run it, and check it against the real tools.

Why: a guide whose command no longer parses, whose link points nowhere or whose variable the
role no longer has fails the first reader who trusts it. These checks run the documented
command lines through the parsers the programs themselves use, without running anything:

* ``workloads …`` lines through :func:`workloads.cli.build_parser` (the console script's own
  parser: every subcommand module's ``register``), the inner command of ``workloads run IMAGE
  -- ARGS`` and of ``workloads monitor … -- workloads ARGS`` included;
* ``ansible-playbook …`` lines through the parser ``ansible.cli.playbook.PlaybookCLI`` builds
  for the real ``ansible-playbook``, and the playbook they name must exist in ``ansible/``;
* relative links (inline, reference-style with their definitions, HTML ``<a href>`` and
  ``<img src>``), and their ``#anchor`` against the target's headings as GitHub slugs them; a
  ``[text][label]`` whose label the page never defines renders as plain text, and fails too;
* ``yaml`` code blocks, which must parse;
* role variables (role-prefixed names such as ``nvidia_driver_branch``) against the role's
  ``meta/argument_specs.yml``; a role-prefixed name that is no option must be something else
  ``ansible/`` defines (a variable a playbook reads, a module, a tag, a registered fact), and
  where a guide sets it (``name: value``, ``-e name=value``) an option or a playbook's variable.

Where commands are read: fenced code blocks (any language, inside a blockquote too), indented
code blocks, and inline code spans in prose. A line is one logical shell line (``\\``
continuations joined, ``#`` comments dropped, a ``$ `` or ``% `` prompt dropped) split into
simple commands at ``&&``, ``||``, ``;``, ``|``, ``&`` and parentheses; the commands of ``$(…)``
and backquote substitutions and the quoted line of ``bash -c '…'`` or ``ssh HOST '…'`` are read
as lines of their own. A simple command is checked when its program is ``workloads`` (any path
ending in it: ``.venv/bin/workloads``, ``<acceptance_venv>/bin/workloads``),
``python [OPTIONS] -m workloads``, or ``ansible-playbook``, after leading ``NAME=value``
assignments (``ExecStart=…/bin/workloads …`` is the program itself), the shell's own words
(``if``, ``then``, ``do``, ``!``, ``{`` …), a YAML key or list marker (``- command: workloads …``)
and the wrappers in ``WRAPPERS`` (``sudo``, ``env``, ``timeout N``, ``srun …``, ``xargs``,
``nice``, ``numactl``, ``uv run``, ``ssh HOST`` …: the first ``workloads`` word after them);
``docker``/``podman run … IMAGE ARGS`` is checked when IMAGE is a ``…/workloads:TAG`` image
(whose entrypoint is ``workloads``; a leading ``workloads`` word in ARGS is the same program),
or when a later word is ``workloads``, and ``docker exec CONTAINER workloads …`` likewise.
Not read: ``docker compose run SERVICE …`` (the service's entrypoint is in compose.yaml) and a
``# `` root prompt (a comment to the shell). Placeholders stay as written (``~/my-inventory``,
``<run>``, ``SPEC.yaml`` parse as the values they stand for); ``...`` and ``…`` words (more
options) are dropped, and a subcommand written in capitals (``workloads COMMAND --help``) is a
placeholder, not checked. Redirections (``> file``) are dropped.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import re
import shlex
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

# Where commands and variables are documented: the front page, the guides, the component READMEs.
GUIDE_GLOBS = (
    "README.md",
    "docs/*.md",
    "ansible/README.md",
    "ansible/roles/*/README.md",
    "scripts/slurm/README.md",
    "images/README.md",
    "tests/README.md",
)
# tests/README.md names pytest fixtures and modules (docker_engine, docker_host) that share a
# role's prefix without being its variables: it is read for commands and links, not variables.
NOT_VARIABLE_DOCS = ("tests/README.md",)
# Names a guide shows on purpose as wrong: ansible/README.md shows site.yml refusing this one.
DELIBERATE_MISSPELLINGS = frozenset({"nvidia_driver_brnach"})

SEPARATORS = frozenset({"&&", "||", ";", "|", "&", ";;", "|&", "(", ")", "((", "))"})
REDIRECTS = frozenset({">", ">>", "<", "2>", "2>>", "&>", "1>"})
WRAPPERS = frozenset({"sudo", "env", "time", "exec", "nohup", "srun", "mpirun", "timeout",
                      "apptainer", "singularity", "command", "xargs", "watch", "nice", "ionice",
                      "numactl", "taskset", "stdbuf", "chrt", "setsid", "flock", "systemd-run",
                      "unbuffer", "ssh", "uv", "pipx", "poetry", "pdm", "hatch", "conda",
                      "mamba", "micromamba", "runuser", "su"})
# Words the shell reads before a command: `if workloads check; then`, `do workloads …; done`.
SHELL_KEYWORDS = frozenset({"!", "{", "}", "if", "then", "elif", "else", "while", "until", "do"})
# Shells whose quoted argument is a command line of its own: `bash -c '…'`, `ssh HOST '…'`.
INNER_SHELLS = frozenset({"bash", "sh", "zsh", "dash", "ssh", "su", "runuser"})
# Engines whose `run IMAGE ARGS` runs the image's entrypoint, and `exec CONTAINER CMD` a command.
ENGINES = frozenset({"docker", "podman", "nerdctl"})
# A shell prompt written before a documented command: `$ workloads check`, `% workloads check`.
PROMPT = re.compile(r"^\s*[$%]\s+")
# A YAML list item or key before a command: `- workloads check`, `ansible.builtin.command: …`.
YAML_KEY = re.compile(r"^(-|[A-Za-z_][\w.-]*:)$")
# Command substitutions, innermost first: $(…) without nested parentheses, and `…`.
SUBSTITUTION = re.compile(r"\$\(([^()]*)\)|`([^`]*)`")
PLACEHOLDER_WORDS = frozenset({"...", "…"})
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"^python(3(\.\d+)?)?$")
CAPS_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*$")


@dataclass(frozen=True)
class Problem:
    """One documentation error, located as an editor opens it (path:line)."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class Command:
    """A documented command: the program (``workloads`` or ``ansible-playbook``) and its argv."""

    path: str
    line: int
    program: str
    argv: tuple[str, ...]
    text: str
    whole: bool = True  # a code line, a whole command; False: an inline mention in prose


# ---------------------------------------------------------------------------- Markdown reading

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
BLOCKQUOTE = re.compile(r"^(\s{0,3}>\s?)+")


@dataclass
class Page:
    """A Markdown file split into code lines and prose lines (with inline code removed)."""

    path: str
    code: list[tuple[int, str]] = field(default_factory=list)
    inline: list[tuple[int, str]] = field(default_factory=list)
    prose: list[tuple[int, str]] = field(default_factory=list)


def read_page(path: str, text: str) -> Page:
    """Split ``text``: fenced and indented code, inline code spans, and the prose around them."""
    page = Page(path)
    in_fence: str | None = None
    previous_blank = True
    in_indented = False
    in_list = False
    fence_quoted = False
    for number, line in enumerate(text.split("\n"), 1):
        quoted = BLOCKQUOTE.match(line)
        if quoted and (fence_quoted or not in_fence):  # > ```sh: a block inside a quote
            line = line[quoted.end():]
        fence = FENCE.match(line)
        if in_fence:
            if fence and fence.group(1) == in_fence:
                in_fence = None
            else:
                page.code.append((number, line))
            continue
        if fence:
            in_fence = fence.group(1)
            fence_quoted = bool(quoted)
            in_indented = False
            continue
        blank = not line.strip()
        if re.match(r"^\s{0,3}([*+-]|\d+[.)])\s", line):
            in_list = True
        elif blank:
            pass
        elif not line.startswith((" ", "\t")):
            in_list = False
        indented = line.startswith(("    ", "\t")) and not blank
        if indented and not in_list and (previous_blank or in_indented):
            in_indented = True
            page.code.append((number, line.strip()))
        else:
            if not blank:
                in_indented = False
            for match in INLINE_CODE.finditer(line):
                page.inline.append((number, match.group(2).strip()))
            page.prose.append((number, INLINE_CODE.sub("", line)))
        previous_blank = blank
    return page


def logical_lines(lines: Sequence[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Join shell ``\\`` continuations; each logical line carries its first line's number."""
    start: int | None = None
    parts: list[str] = []
    for number, line in lines:
        if start is None:
            start = number
        if line.rstrip().endswith("\\"):
            parts.append(line.rstrip()[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts)
        start, parts = None, []
    if start is not None:
        yield start, " ".join(parts)


def strip_comment(line: str) -> str:
    """Drop a shell comment: ``#`` at a word's start, outside quotes (``a#b`` stays a word)."""
    quote: str | None = None
    for i, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def split_commands(line: str) -> list[list[str]]:
    """Shell words of ``line``, cut into simple commands; raises ValueError on open quotes."""
    lexer = shlex.shlex(strip_comment(line), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    lexer.commenters = ""
    commands: list[list[str]] = [[]]
    skip_next = False
    for word in lexer:
        if skip_next:
            skip_next = False
            continue
        if word in SEPARATORS:
            commands.append([])
        elif word in REDIRECTS:
            skip_next = True
        elif re.match(r"^\d?>>?\S", word):
            continue  # 2>/dev/null, >file
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def basename(word: str) -> str:
    return word.rstrip("/").rsplit("/", 1)[-1]


def _is_workloads(word: str) -> bool:
    """The program itself: ``workloads`` or an environment's ``…/bin/workloads``, not a folder."""
    return word == "workloads" or word.endswith("/bin/workloads")


def recognise(words: list[str]) -> tuple[str, list[str]] | None:
    """(program, argv) when ``words`` runs ``workloads`` or ``ansible-playbook``, else None."""
    while len(words) > 2 and YAML_KEY.match(words[0]):  # - command: workloads check (a task)
        words = words[1:]
    i = 0
    while i < len(words) and (ENV_ASSIGNMENT.match(words[i]) or words[i] in SHELL_KEYWORDS):
        # ExecStart=/opt/venv/bin/workloads health: an assignment whose value is the program
        value = words[i].partition("=")[2]
        if value and _is_workloads(value):
            return "workloads", words[i + 1:]
        i += 1
    words = words[i:]
    if not words:
        return None
    head = basename(words[0])
    if _is_workloads(words[0]):
        return "workloads", words[1:]
    if head == "ansible-playbook":
        return "ansible-playbook", words[1:]
    if PYTHON.match(head) and "-m" in words:  # python -m, python -u -m, python -X dev -m
        at = words.index("-m")
        if words[at + 1:at + 2] == ["workloads"]:
            return "workloads", words[at + 2:]
    if head in ENGINES and "exec" in words[1:3]:
        found = _after_workloads(words[words.index("exec") + 1:])
        return ("workloads", found) if found is not None else None
    if head in ENGINES and "run" in words[1:3]:
        rest = words[words.index("run") + 1:]
        for j, word in enumerate(rest):
            if re.search(r"(^|/)workloads:[^/\s]*$", word):
                argv = rest[j + 1:]
                return "workloads", argv[1:] if argv and _is_workloads(argv[0]) else argv
        found = _after_workloads(rest)
        return ("workloads", found) if found is not None else None
    if head in WRAPPERS:
        rest = words[1:]
        found = _after_workloads(rest)
        if found is not None:
            return "workloads", found
        for j, word in enumerate(rest):
            if basename(word) == "ansible-playbook":
                return "ansible-playbook", rest[j + 1:]
    return None


def _after_workloads(words: list[str]) -> list[str] | None:
    for j, word in enumerate(words):
        if _is_workloads(word) and (j == 0 or words[j - 1] != "--entrypoint"):
            return words[j + 1:]
    return None


def simple_commands(line: str, substitutions: bool = True, depth: int = 0) -> list[list[str]]:
    """The simple commands of a shell line, those it runs inside it included: the commands of
    ``$(…)`` and backquote substitutions (``substitutions``; an inline code span's backquotes are
    its own delimiters), and the quoted command line of ``bash -c '…'`` or ``ssh HOST '…'``."""
    inner: list[list[str]] = []
    if substitutions:
        while match := SUBSTITUTION.search(line):
            inner += simple_commands(match.group(1) or match.group(2) or "", True, depth + 1)
            line = line[:match.start()] + " SUBSTITUTED " + line[match.end():]
    commands = split_commands(line)
    for words in commands:
        if basename(words[0]) in INNER_SHELLS and depth < 3:
            for word in words[1:]:
                if re.search(r"\s", word):
                    inner += simple_commands(word, substitutions, depth + 1)
    return commands + inner


def commands_in(path: str, text: str) -> tuple[list[Command], list[Problem]]:
    """Every ``workloads`` and ``ansible-playbook`` command of a page; lines that do not split."""
    page = read_page(path, text)
    found: list[Command] = []
    problems: list[Problem] = []
    sources = [(n, line, True) for n, line in logical_lines(page.code)]
    sources += [(n, span, False) for n, span in page.inline]
    for number, line, is_block in sources:
        if is_block:
            line = PROMPT.sub("", line)
        try:
            commands = simple_commands(line, substitutions=is_block)
        except ValueError as exc:
            if is_block and re.search(r"\b(workloads|ansible-playbook)\b", line):
                message = f"cannot split into shell words ({exc}): {line.strip()}"
                problems.append(Problem(path, number, message))
            continue
        for words in commands:
            recognised = recognise(words)
            if recognised:
                program, argv = recognised
                argv = [w for w in argv if w not in PLACEHOLDER_WORDS]
                found.append(Command(path, number, program, tuple(argv), line.strip(), is_block))
    return found, problems


# ---------------------------------------------------------------------------- the real parsers

# Parser errors that mean "more is needed", which an inline mention in prose may leave out.
INCOMPLETE = re.compile(
    r"the following arguments are required|expected (one|at least one) argument"
)


def _parse_quietly(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    second_pass: Callable[[argparse.Namespace], argparse.Namespace] | None = None,
    first: argparse.Namespace | None = None,
) -> tuple[argparse.Namespace | None, str]:
    """Parse ``argv`` without printing or exiting: (namespace, "") or (None, the parser's error).

    With ``second_pass``, ``first`` (the namespace already parsed) goes through it instead:
    ``workloads run`` parses its options between IMAGE and ``--`` again, in its own code.
    """
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            if second_pass is not None and first is not None:
                namespace = second_pass(first)
            else:
                namespace = parser.parse_args(list(argv))
    except SystemExit as exc:
        if exc.code in (0, None):  # --help, --version
            return argparse.Namespace(), ""
        lines = [line for line in err.getvalue().splitlines() if "error" in line]
        return None, (lines[-1] if lines else err.getvalue().strip()) or f"exit {exc.code}"
    return namespace, ""


def whole_words_only(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """No abbreviated options, in the parser and every subcommand's: a guide that writes
    ``--per-dev`` for ``--per-device`` works only until another option starts the same way."""
    parser.allow_abbrev = False
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                whole_words_only(sub)
    return parser


@cache
def workloads_parser() -> argparse.ArgumentParser:
    from workloads.cli import build_parser

    return whole_words_only(build_parser())


@cache
def playbook_parser() -> argparse.ArgumentParser:
    with warnings.catch_warnings():  # cryptography's DSA deprecation, raised by ansible's import
        warnings.simplefilter("ignore")
        from ansible.cli.playbook import PlaybookCLI

        cli = PlaybookCLI(["ansible-playbook"])
        cli.init_parser()
    return whole_words_only(cli.parser)


def check_workloads(
    command: Command, argv: Sequence[str] | None = None, depth: int = 0
) -> list[Problem]:
    """``workloads ARGV`` through the console script's parser, then run's and monitor's inner."""
    argv = list(command.argv if argv is None else argv)
    if (argv and CAPS_PLACEHOLDER.match(argv[0])) or not (argv or command.whole):
        return []
    namespace, error = _parse_quietly(workloads_parser(), argv)
    name = getattr(namespace, "command", None)
    if namespace is not None and name == "run":
        from tfhost.commands.run import options_after_image  # run's own second pass

        namespace, error = _parse_quietly(namespace.parser, argv, options_after_image, namespace)
    if namespace is None:
        if not command.whole and INCOMPLETE.search(error):
            return []  # prose names a command without all its arguments: `workloads report --fleet`
        return [Problem(command.path, command.line, f"{error}: {command.text}")]
    inner = list(getattr(namespace, "args", None) or []) if depth == 0 else []
    if inner and inner[0] == "--":
        inner = inner[1:]
    if name == "run" and inner:
        return check_workloads(command, inner, depth + 1)
    if name == "monitor" and inner and _is_workloads(inner[0]):
        return check_workloads(command, inner[1:], depth + 1)
    return []


def workloads_subcommands() -> list[str]:
    """The subcommands the console script's parser knows, as ``workloads --help`` lists them."""
    for action in workloads_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return sorted(action.choices)
    return []


def vaulted_groups(root: Path) -> frozenset[str]:
    """The example inventory's groups whose group_vars hold an encrypted file (``ansible-vault``):
    the guides copy it (``cp -r inventory ~/my-inventory``) and create that vault."""
    group_vars = root / "ansible" / "inventory" / "group_vars"
    groups = set()
    for path in group_vars.rglob("*") if group_vars.is_dir() else []:
        if path.is_file() and path.read_bytes().startswith(b"$ANSIBLE_VAULT;"):
            groups.add(path.relative_to(group_vars).parts[0].removesuffix(".yml"))
    return frozenset(groups)


def play_groups(playbook: Path) -> set[str]:
    """The groups a playbook's plays run on, ``{{ x | default('group') }}`` read as its default."""
    groups: set[str] = set()
    for play in yaml.safe_load(playbook.read_text(encoding="utf-8")) or []:
        hosts = str(play.get("hosts", "")) if isinstance(play, dict) else ""
        default = re.search(r"default\(\s*['\"]([^'\"]+)['\"]", hosts)
        pattern = default.group(1) if default else hosts
        groups |= {g.strip("!&") for g in re.split(r"[:,]", pattern) if g.strip("!&")}
    return groups


def _vault_secret(command: Command, namespace: argparse.Namespace, root: Path) -> list[Problem]:
    """A play on a group whose vars hold a vault needs its secret, or Ansible stops at "no vault
    secrets found" before the first task: against the guides' inventory (``~/my-inventory`` or
    the example ``inventory``, ansible.cfg's default), every such line must give one."""
    inventories = getattr(namespace, "inventory", None) or ["inventory"]
    if not any("inventory" in Path(i).name for i in inventories):
        return []  # -i gpu7, or a site's own inventory: the guides know nothing of its vaults
    secrets = ("ask_vault_pass", "vault_password_files", "vault_ids")
    if any(getattr(namespace, name, None) for name in secrets) \
            or "ANSIBLE_VAULT_PASSWORD_FILE=" in command.text:
        return []
    vaulted = vaulted_groups(root)
    problems = []
    for playbook in getattr(namespace, "args", []):
        path = root / "ansible" / playbook
        if not vaulted or not path.is_file():
            continue
        needing = sorted(g for g in play_groups(path) if g in vaulted or g == "all")
        if needing:
            problems.append(Problem(
                command.path, command.line,
                f"{playbook} runs on {needing[0]}, whose group_vars hold a vault: add "
                f"--ask-vault-pass (or --vault-password-file), or Ansible stops at 'no vault "
                f"secrets found': {command.text}"))
    return problems


# Tags Ansible itself gives meaning to (``--tags all``, ``--skip-tags never``).
SPECIAL_TAGS = frozenset({"all", "always", "never", "tagged", "untagged"})


def check_playbook(command: Command, root: Path) -> list[Problem]:
    """``ansible-playbook ARGV`` through ansible-playbook's parser; each playbook must be a YAML
    file of ``ansible/``, and each ``--tags``/``--skip-tags`` name a tag ``ansible/`` carries
    (Ansible runs nothing, silently, for a tag nothing carries)."""
    if not (command.argv or command.whole):
        return []
    namespace, error = _parse_quietly(playbook_parser(), command.argv)
    if namespace is None:
        if not command.whole and INCOMPLETE.search(error):
            return []
        return [Problem(command.path, command.line, f"{error}: {command.text}")]
    problems = []
    for playbook in getattr(namespace, "args", []):
        if "<" in playbook or CAPS_PLACEHOLDER.match(Path(playbook).stem):
            continue
        here = (root / command.path).parent
        found = any((base / playbook).is_file() for base in (root / "ansible", root, here))
        if not found or Path(playbook).suffix not in (".yml", ".yaml"):
            problems.append(Problem(command.path, command.line,
                                    f"playbook {playbook} is not in ansible/: {command.text}"))
    if command.whole:
        problems += _vault_secret(command, namespace, root)
    known = ansible_names(root).tags | SPECIAL_TAGS
    for option in ("tags", "skip_tags"):
        for value in getattr(namespace, option, None) or []:
            for tag in filter(None, (t.strip() for t in value.split(","))):
                if tag not in known and "<" not in tag and not CAPS_PLACEHOLDER.match(tag):
                    close = difflib.get_close_matches(tag, sorted(known), n=1)
                    hint = f" (did you mean {close[0]}?)" if close else ""
                    flag = "--" + option.replace("_", "-")
                    problems.append(Problem(command.path, command.line,
                                            f"{flag} {tag}: no play, role or task of ansible/ "
                                            f"carries that tag{hint}: {command.text}"))
    return problems


def check_commands(path: str, text: str, root: Path) -> tuple[list[Command], list[Problem]]:
    commands, problems = commands_in(path, text)
    for command in commands:
        if command.program == "workloads":
            problems += check_workloads(command)
        else:
            problems += check_playbook(command, root)
    return commands, problems


# ---------------------------------------------------------------------------- links and anchors

TITLE = r"""(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?"""
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?" + TITLE + r"\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[([^\]]+)\]:\s*<?(\S+?)>?" + TITLE + r"\s*$")
# A reference-style use: [text][label], or [label][] (the label is the text).
REFERENCE_USE = re.compile(r"(?<![\]\\])\[((?:[^\]\\]|\\.)+)\]\[([^\]]*)\]")
# What HTML in Markdown links to: <a href="…">, <img src="…">.
HTML_LINK = re.compile(r"""<(?:a|img|source)\b[^>]*?\s(?:href|src)\s*=\s*(["'])(.*?)\1""",
                       re.IGNORECASE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: rendered text, lower case, no punctuation, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link renders as its text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every anchor of a page: heading slugs (repeats numbered -1, -2, as GitHub does), <a name>."""
    seen: dict[str, int] = {}
    result: set[str] = set()
    in_fence = None
    for line in text.split("\n"):
        fence = FENCE.match(line)
        if in_fence:
            if fence and fence.group(1) == in_fence:
                in_fence = None
            continue
        if fence:
            in_fence = fence.group(1)
            continue
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            result.add(base if count == 0 else f"{base}-{count}")
        result.update(HTML_ANCHOR.findall(line))
    return result


def _label(label: str) -> str:
    """A reference label as Markdown matches it: case and runs of white space do not count."""
    return " ".join(label.split()).casefold()


def check_links(path: str, text: str, root: Path) -> tuple[int, list[Problem]]:
    """Every relative link of a page resolves, and its #anchor names a heading of the target."""
    page = read_page(path, text)
    problems: list[Problem] = []
    count = 0
    own_dir = (root / path).parent
    defined = {_label(m.group(1)) for _, line in page.prose if (m := REFERENCE.match(line))}
    for number, line in page.prose:
        targets = LINK.findall(line) + [m.group(2) for m in HTML_LINK.finditer(line)]
        reference = REFERENCE.match(line)
        if reference:
            targets.append(reference.group(2))
        for use in REFERENCE_USE.finditer(line):
            label = use.group(2) or use.group(1)
            if _label(label) not in defined:
                count += 1
                problems.append(Problem(path, number, f"link [...][{label}]: no [{label}]: "
                                        f"definition in {path}, so it renders as plain text"))
        for target in targets:
            if SCHEME.match(target) or target.startswith("//"):
                continue
            count += 1
            file_part, _, anchor = target.partition("#")
            resolved = (own_dir / file_part).resolve() if file_part else (root / path).resolve()
            shown = f"[...]({target})"
            if not resolved.exists():
                problems.append(Problem(path, number, f"link {shown}: {file_part} does not exist"))
                continue
            if anchor and resolved.is_file() and resolved.suffix == ".md":
                names = anchors(resolved.read_text(encoding="utf-8"))
                if anchor not in names:
                    close = difflib.get_close_matches(anchor, sorted(names), n=1)
                    hint = f" (did you mean #{close[0]}?)" if close else ""
                    where = file_part or path
                    message = f"link {shown}: no heading #{anchor} in {where}{hint}"
                    problems.append(Problem(path, number, message))
    return count, problems


# ---------------------------------------------------------------------------- YAML blocks

YAML_BLOCK = re.compile(r"^(\s*)(```|~~~)\s*ya?ml\s*\n(.*?)^\1\2\s*$", re.MULTILINE | re.DOTALL)


def check_yaml(path: str, text: str) -> tuple[int, list[Problem]]:
    """Every ``yaml`` code block parses: an inventory, vars file or task a reader pastes must
    load, or Ansible refuses it before doing anything."""
    problems: list[Problem] = []
    blocks = list(YAML_BLOCK.finditer(text))
    for block in blocks:
        first = text.count("\n", 0, block.start()) + 2  # the block's first line
        try:
            yaml.safe_load(block.group(3))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = first + (mark.line if mark is not None else 0)
            reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            problems.append(Problem(path, line, f"the YAML block does not parse: {reason}"))
    return len(blocks), problems


# ---------------------------------------------------------------------------- role variables

@dataclass(frozen=True)
class AnsibleNames:
    """What role-prefixed names may name: options per role, and what else ansible/ defines."""

    options: dict[str, frozenset[str]]
    other: dict[str, str]  # name -> what it is: play variable, module, tag, fact, internal variable
    tags: frozenset[str] = frozenset()  # every tag a play, role or task of ansible/ carries

    @property
    def pattern(self) -> re.Pattern[str]:
        roles = sorted(self.options, key=len, reverse=True)
        return re.compile(r"(?<![\w.\-/<$])(?:" + "|".join(roles) + r")_[a-z0-9_]*[a-z0-9]")


def _walk(node: object, visit: Callable[[dict[str, object]], None]) -> None:
    if isinstance(node, dict):
        visit(node)
        for value in node.values():
            _walk(value, visit)
    elif isinstance(node, list):
        for value in node:
            _walk(value, visit)


@cache
def ansible_names(root: Path = ROOT) -> AnsibleNames:
    """Every role's argument_specs, and the modules, tags, facts and play variables of ansible/."""
    ansible = root / "ansible"
    options: dict[str, frozenset[str]] = {}
    for spec in sorted(ansible.glob("roles/*/meta/argument_specs.yml")):
        data = yaml.safe_load(spec.read_text(encoding="utf-8"))
        names: set[str] = set()
        for entry in (data.get("argument_specs") or {}).values():
            names |= set((entry or {}).get("options") or {})
        options[spec.parts[-3]] = frozenset(names)
    other: dict[str, str] = {}
    carried: set[str] = set()
    for module in [*ansible.glob("library/*.py"), *ansible.glob("roles/*/library/*.py")]:
        other[module.stem] = "module"
    for internal in ansible.glob("roles/*/vars/*.yml"):
        for name in yaml.safe_load(internal.read_text(encoding="utf-8")) or {}:
            other.setdefault(str(name), "internal variable")

    def visit(node: dict[str, object]) -> None:
        tags = node.get("tags")
        for tag in [tags] if isinstance(tags, str) else tags if isinstance(tags, list) else []:
            other.setdefault(str(tag), "tag")
            carried.add(str(tag))
        if isinstance(node.get("register"), str):
            other.setdefault(str(node["register"]), "registered fact")
        facts = node.get("ansible.builtin.set_fact", node.get("set_fact"))
        if isinstance(facts, dict):
            for name in facts:
                other.setdefault(str(name), "fact")

    tasks = [*ansible.glob("*.yml"), *ansible.glob("tasks/*.yml"),
             *ansible.glob("roles/*/tasks/*.yml"), *ansible.glob("roles/*/handlers/*.yml")]
    for path in tasks:
        _walk(yaml.safe_load(path.read_text(encoding="utf-8")), visit)
    plays = [*ansible.glob("*.yml"), *ansible.glob("tasks/*.yml"), *ansible.glob("vars/*.yml")]
    for playbook in plays:
        for name in re.findall(r"\b[a-z][a-z0-9_]+\b", playbook.read_text(encoding="utf-8")):
            other.setdefault(name, "play variable")
    return AnsibleNames(options, other, frozenset(carried))


# What a guide may show being set (``name: value``, ``-e name=value``): a role's option or a
# variable a playbook reads; a module, tag, fact or role-internal variable (vars/) is not.
SETTABLE = frozenset({"play variable"})


def check_variables(path: str, text: str, names: AnsibleNames) -> tuple[int, list[Problem]]:
    """Every role-prefixed name in a guide is that role's option, or a thing ansible/ defines."""
    problems: list[Problem] = []
    count = 0
    pattern = names.pattern
    roles = sorted(names.options, key=len, reverse=True)
    for number, line in enumerate(text.split("\n"), 1):
        for match in pattern.finditer(line):
            name = match.group(0)
            if name in DELIBERATE_MISSPELLINGS:
                continue
            count += 1
            role = next(r for r in roles if name.startswith(r + "_"))
            if name in names.options[role]:
                continue
            kind = names.other.get(name)
            setting = re.match(r"\s*(=|:\s)", line[match.end():] + " ")
            if kind and not (setting and kind not in SETTABLE):
                continue
            if kind:  # `name: value` or -e name=value: a user sets it, so the role must read it
                problems.append(Problem(path, number,
                                        f"{name} is set here, but it is a {kind} of ansible/, "
                                        f"not an option of role {role} or a play variable"))
                continue
            close = difflib.get_close_matches(name, sorted(names.options[role]), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            problems.append(Problem(path, number,
                                    f"{name} is no option of role {role} "
                                    f"(ansible/roles/{role}/meta/argument_specs.yml), nor a play "
                                    f"variable, module, tag or fact of ansible/{hint}"))
    return count, problems


# ---------------------------------------------------------------------------- the project's pages

def guide_paths(root: Path = ROOT) -> list[str]:
    """The documented pages, relative to ``root``, in a stable order."""
    paths: list[str] = []
    for pattern in GUIDE_GLOBS:
        paths += sorted(p.relative_to(root).as_posix() for p in root.glob(pattern))
    return paths


def report(problems: Iterable[Problem]) -> str:
    return "\n".join(str(p) for p in problems)


if __name__ == "__main__":  # python tests/docs/doccheck.py: the same checks, printed
    names = ansible_names(ROOT)
    everything: list[Problem] = []
    for rel in guide_paths(ROOT):
        body = (ROOT / rel).read_text(encoding="utf-8")
        everything += check_commands(rel, body, ROOT)[1] + check_links(rel, body, ROOT)[1]
        everything += check_yaml(rel, body)[1]
        if rel not in NOT_VARIABLE_DOCS:
            everything += check_variables(rel, body, names)[1]
    print(report(everything) or "no problems")
    sys.exit(1 if everything else 0)
