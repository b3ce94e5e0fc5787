"""The one exception type users see: a problem and its fix, printed as one line.

Every command raises :class:`WorkloadError` for bad input or a failed precondition;
the CLI turns it into ``workloads <cmd>: error: <problem>; <fix>`` on stderr and
exit code 2, never a traceback. Keeping problem and fix separate makes it hard to
write an error message that forgets to say what to do.
"""

from __future__ import annotations


class WorkloadError(Exception):
    """A user-facing failure with a one-line explanation and a suggested fix."""

    exit_code = 2

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem.rstrip(".")
        self.fix = fix.rstrip(".") if fix else None
        super().__init__(self.one_line())

    def one_line(self) -> str:
        text = self.problem if not self.fix else f"{self.problem}; {self.fix}"
        return " ".join(text.split())


class OutOfMemory(WorkloadError):
    """The accelerator (or host) ran out of memory; exit code 3 so sweeps can tell."""

    exit_code = 3


def is_out_of_memory(exc: BaseException) -> bool:
    """Recognise OOM errors of TensorFlow, JAX and PyTorch without importing them."""
    name = type(exc).__name__
    if name in {"ResourceExhaustedError", "OutOfMemoryError"}:
        return True
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "out of memory" in text.lower()
