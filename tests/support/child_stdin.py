"""Every child process of the suite gets its own /dev/null as stdin.

Why: the O_NONBLOCK flag lives on the open file, not on the descriptor. While the
suite's children shared one stdin (pytest's /dev/null on fd 0), one child that made
its stdin non-blocking (seen on a freshly booted machine while the VM jobs ran in the
background thread) made it non-blocking for every child started after it, and
ansible-core refuses to start then ("Ansible requires blocking IO on
stdin/stdout/stderr"). Repairing the flag before each test only made that rarer: the
background thread starts children while a foreground test runs.

With `subprocess.DEVNULL` as the default, `Popen` opens /dev/null afresh for each child,
so a child can change only its own open file. A caller that passes `stdin=` (a pipe,
input text, a file) is untouched. Children of children inherit their parent's private
/dev/null, so what a tool does to its own stdin stays in its own process tree.
"""

from __future__ import annotations

import functools
import subprocess
from typing import Any

_ORIGINAL_INIT = subprocess.Popen.__init__


@functools.wraps(_ORIGINAL_INIT)
def _init_with_private_stdin(self: subprocess.Popen[Any], args: Any, bufsize: int = -1,
                             executable: Any = None, stdin: Any = None,
                             *rest: Any, **kwargs: Any) -> None:
    if stdin is None:
        stdin = subprocess.DEVNULL
    _ORIGINAL_INIT(self, args, bufsize, executable, stdin, *rest, **kwargs)


def install() -> None:
    """Give each child started from now on (through `subprocess`, asyncio included) its own stdin.

    The class's `__init__` is replaced, not the name `subprocess.Popen`, so modules that
    imported `Popen` before this ran are covered too. The suite starts no child another
    way (no os.system, fork or spawn: tests/test_stdio.py checks).
    """
    if not installed():
        subprocess.Popen.__init__ = _init_with_private_stdin  # type: ignore[method-assign]


def installed() -> bool:
    return subprocess.Popen.__init__ is _init_with_private_stdin
