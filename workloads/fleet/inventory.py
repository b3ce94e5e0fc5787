"""The hosts a run was meant to cover: `--inventory FILE`, one inventory host name a line.

A host that never produced a record (unreachable before the play could write its error
record, a controller killed mid-run, a record deleted by hand) is simply absent from the
run's directory: judged from the records alone, the fleet looks complete without it. The
report is therefore given the list the play ran over, and each name in it without a
record fails. `accept.yml` writes the list into the run's directory as `inventory.txt`
(every host its `acceptance_hosts` pattern names in the inventory, `--limit` or not, so
measuring one host again keeps the others expected) and passes it; by hand, `workloads
report --fleet RUN` reads that file when it is there.

Bad input is one line and exit 2: a file that cannot be read, is not UTF-8 text, names no
host, or holds a "name" with spaces or control characters (a pasted table, not a list).
"""

from __future__ import annotations

import re
from pathlib import Path

from workloads.bounded import BadInput, read_capped
from workloads.errors import WorkloadError, clip

RUN_INVENTORY = "inventory.txt"
MAX_BYTES = 4 << 20  # 100,000 host names of 40 characters
# An inventory hostname as Ansible takes it: a DNS name, an IPv4 or IPv6 address, an alias.
HOST_NAME = re.compile(r"[A-Za-z0-9_.:\[\]@%+-]{1,253}")
FIX = "give a file of inventory host names, one a line (accept.yml writes RUN/inventory.txt)"


def read_inventory(path: Path) -> list[str]:
    """The host names in `path`, in order, each once; blank lines and `#` comments skipped."""
    try:
        text = read_capped(path, MAX_BYTES).decode("utf-8")
    except IsADirectoryError:
        raise WorkloadError(f"--inventory {clip(str(path), 120)}: is a directory", FIX) from None
    except OSError as exc:
        raise WorkloadError(f"--inventory {clip(str(path), 120)}: "
                            f"{exc.strerror or 'cannot be read'}", FIX) from None
    except BadInput as exc:
        raise WorkloadError(f"--inventory {clip(str(path), 120)} {exc}", FIX) from None
    except UnicodeDecodeError:
        raise WorkloadError(f"--inventory {clip(str(path), 120)}: not UTF-8 text", FIX) from None
    names: dict[str, None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not HOST_NAME.fullmatch(name):
            raise WorkloadError(f"--inventory {clip(str(path), 120)} line {number}: "
                                f"{clip(name, 40)!r} is not a host name", FIX)
        names[name] = None
    if not names:
        raise WorkloadError(f"--inventory {clip(str(path), 120)} names no host", FIX)
    return list(names)


def run_inventory(directory: Path, given: Path | None) -> list[str]:
    """The expected hosts: `given`, else the run's own inventory.txt, else none known."""
    if given is not None:
        return read_inventory(given)
    own = directory / RUN_INVENTORY
    return read_inventory(own) if own.is_file() else []
