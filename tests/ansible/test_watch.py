"""The command-line watch sees a secret on a command line (else its clean bill means nothing)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.ansible.watch import CommandLineWatch


def test_watch_catches_a_secret_on_a_command_line() -> None:
    secret = "canary-7f3a9c-not-a-key"
    with CommandLineWatch(secret) as watch:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(0.5)", secret], check=True)
        time.sleep(0.1)
    assert watch.leaks, "a process carrying the secret in argv went unnoticed"
    assert all("<KEY>" in line and secret not in line for line in watch.leaks)


def test_watch_stays_quiet_when_the_secret_only_travels_on_stdin() -> None:
    secret = "canary-1b2c3d-not-a-key"
    with CommandLineWatch(secret) as watch:
        reader = "import sys, time; sys.stdin.read(); time.sleep(0.3)"
        subprocess.run([sys.executable, "-c", reader], input=secret, text=True, check=True)
    assert watch.samples > 5
    assert watch.leaks == []


def test_watch_sees_a_module_run_from_a_copied_file_and_masks_the_secret(tmp_path: Path) -> None:
    """The pipelining check in test_site.py relies on this: a copied module shows in argv."""
    secret = "canary-4e5f6a-not-a-key"
    module = tmp_path / "ansible-tmp-1" / "AnsiballZ_stat.py"
    module.parent.mkdir()
    module.write_text("import time; time.sleep(0.5)\n")
    with CommandLineWatch(secret) as watch:
        subprocess.run([sys.executable, str(module), secret], check=True)
        piped = "import sys; exec(sys.stdin.read())"
        subprocess.run([sys.executable, "-c", piped], input="import time; time.sleep(0.3)",
                       text=True, check=True)
    assert watch.unpipelined, "a module run from a copied AnsiballZ file went unnoticed"
    assert all(str(module) in line and "<KEY>" in line and secret not in line
               for line in watch.unpipelined)


def test_a_scoped_watch_counts_only_the_copied_modules_of_its_container(tmp_path: Path) -> None:
    """Other plays of the suite copy modules too (the local connection): not the target's.

    This test's process is in no container, so a scope naming a container ID leaves it out,
    and a scope naming this process's own cgroup path keeps it in.
    """
    module = tmp_path / "ansible-tmp-2" / "AnsiballZ_ping.py"
    module.parent.mkdir()
    module.write_text("import time; time.sleep(0.5)\n")
    own_cgroup = Path("/proc/self/cgroup").read_text().splitlines()[-1].split(":", 2)[2]
    elsewhere = "8dd41241d4541573ef84f6376e5ba968a8ba9f4f6d8aee1b62ff051a5267d72d"
    with CommandLineWatch("unused", scope=elsewhere) as other, \
            CommandLineWatch("unused", scope=own_cgroup) as own:
        subprocess.run([sys.executable, str(module)], check=True)
    assert other.samples > 5 and other.unpipelined == []
    assert any(str(module) in line for line in own.unpipelined)
