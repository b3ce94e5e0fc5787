"""Run ansible-playbook against a target container and read its recap.

Why the CLI and not ansible-runner: the test must exercise exactly what an
operator types (ansible.cfg, inventory, vault password file, tags), and the
log file ANSIBLE_LOG_PATH writes is itself under test (no secret in it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
ANSIBLE_DIR = REPO / "ansible"
BIN = Path(sys.executable).parent
VAULT = ANSIBLE_DIR / "inventory" / "group_vars" / "gpu_hosts" / "vault.yml"
VAULT_PASSWORD = ANSIBLE_DIR / "vault-password.example"
# The dummy key inside the example vault (documented in ansible/README.md).
EXAMPLE_NGC_API_KEY = "nvapi-EXAMPLE-DUMMY-KEY-0000-tfhost-not-a-real-key"

RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)"
    r"\s+ignored=(?P<ignored>\d+)",
    re.MULTILINE,
)


@dataclass(frozen=True)
class PlaybookRun:
    """What one ansible-playbook run printed, logged and summed up."""

    returncode: int
    output: str
    log: str
    seconds: float

    @property
    def recap(self) -> dict[str, int]:
        match = RECAP.search(self.output)
        if match is None:
            raise AssertionError(f"no PLAY RECAP in the output:\n{self.output[-3000:]}")
        return {key: int(value) for key, value in match.groupdict().items() if key != "host"}

    @property
    def recaps(self) -> dict[str, dict[str, int]]:
        """Every host's PLAY RECAP line: host -> ok, changed, ..., failed."""
        return {match["host"]: {key: int(value) for key, value in match.groupdict().items()
                                if key != "host"} for match in RECAP.finditer(self.output)}

    @property
    def failed_task(self) -> str:
        """Name of the first task that failed ("" when none did), e.g. "nvidia_driver : X"."""
        task = ""
        for line in self.output.splitlines():
            if line.startswith("TASK [") or line.startswith("RUNNING HANDLER ["):
                task = line.split("[", 1)[1].rsplit("]", 1)[0]
            elif line.startswith(("fatal:", "failed:")):
                return task
        return ""

    def explain(self) -> str:
        """The tail of the output, for assertion messages."""
        return f"rc={self.returncode}\n{self.output[-6000:]}"


def site_role_order() -> list[str]:
    """The roles tasks/site-roles.yml imports (site.yml's and upgrade.yml's), in order."""
    tasks = yaml.safe_load((ANSIBLE_DIR / "tasks" / "site-roles.yml").read_text())
    return [task["ansible.builtin.import_role"]["name"] for task in tasks]


def write_inventory(path: Path, container: str, group: str = "gpu_hosts") -> Path:
    """An inventory with one host in `group`, reached through `docker exec` (community.docker)."""
    host = {
        "ansible_connection": "community.docker.docker",
        "ansible_python_interpreter": "/usr/bin/python3",
        # docker exec is already root; sudo (no password from root) is how tasks become
        # another user (become_user), as the ngc and tensorflow_host roles do. sudo, as
        # over SSH in production: it lets Ansible pipe each module into python3, where su
        # makes it copy the module first (twice the time per task; tests/ansible/watch.py).
        "ansible_become_method": "sudo",
    }
    inventory = {"all": {"children": {group: {"hosts": {container: host}}}}}
    path.write_text(yaml.safe_dump(inventory, sort_keys=False))
    return path


def run_playbook(
    inventory: Path,
    extra_vars: list[Path],
    log_path: Path,
    *options: str,
    playbook: str = "site.yml",
    vault: Path | None = VAULT,
    timeout: float = 2400,
    search_path: str | None = None,
    env: Mapping[str, str] | None = None,
) -> PlaybookRun:
    """Run `ansible-playbook` from ansible/ with the vault password example and extra vars files.

    `env`: variables for this play alone (ANSIBLE_LIBRARY, TMPDIR, a stub's settings), never
    set in os.environ: the background jobs' children read it while a foreground test runs."""
    args = [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, "-v"]
    if vault is not None:
        args += ["--vault-password-file", str(VAULT_PASSWORD), "-e", f"@{vault}"]
    for path in extra_vars:
        args += ["-e", f"@{path}"]
    args += list(options)
    environment = {
        **os.environ,
        **(env or {}),
        "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
        "ANSIBLE_LOG_PATH": str(log_path),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
        # a test that wants another PATH for the play names it here, never in os.environ:
        # the background jobs' children read os.environ while a foreground test runs
        "PATH": f"{BIN}:{os.environ.get('PATH', '') if search_path is None else search_path}",
    }
    started = time.monotonic()
    result = subprocess.run(args, cwd=ANSIBLE_DIR, env=environment, capture_output=True, text=True,
                            timeout=timeout, check=False)
    seconds = time.monotonic() - started
    log = log_path.read_text() if log_path.exists() else ""
    return PlaybookRun(result.returncode, result.stdout + result.stderr, log, seconds)


def run_local_play(workdir: Path, play: list[dict[str, object]],
                   hosts: Mapping[str, Mapping[str, object]] | None = None,
                   search_path: str | None = None,
                   env: Mapping[str, str] | None = None) -> PlaybookRun:
    """Run `play` (a playbook's plays) against this machine, with the suite's Python.

    For tests that drive one role's tasks (`include_role ... tasks_from`) against
    stubs on PATH: no container, no vault, the role path of ansible/ansible.cfg.
    `hosts` names several local hosts with their own variables (one play, several cases);
    without it the one host is `localhost`. `env`: as run_playbook's.
    """
    playbook = workdir / "play.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    inventory = workdir / "inventory.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    every = hosts or {"localhost": {}}
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {
        name: {**local, **host_vars} for name, host_vars in every.items()}}}))
    return run_playbook(inventory, [], workdir / "play.log", playbook=str(playbook), vault=None,
                        search_path=search_path, env=env)
