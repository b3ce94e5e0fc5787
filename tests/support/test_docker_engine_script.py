"""scripts/docker-engine.sh start: the daemon it leaves running holds none of its caller's files.

Why: dockerd outlives the script. A caller that serialises its work with
`flock LOCKFILE scripts/docker-engine.sh start ...` (or holds any descriptor
without close-on-exec) would otherwise find its lock held for as long as the
daemon runs, and the next `flock` on that file waits forever. Fakes first in
PATH stand in for dockerd (it writes its pid file, lists its open descriptors
and stays up) and for docker (answers `version` once the pid file is there),
with the engine's run folder in the test's own directory.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENGINE = REPO / "scripts" / "docker-engine.sh"

FAKE_DOCKERD = """#!/bin/bash
while [[ $# -gt 0 ]]; do [[ $1 == --pidfile ]] && pidfile=$2; shift; done
ls /proc/$$/fd >{folder}/dockerd-fds
echo $$ >"$pidfile"
exec sleep 60
"""

FAKE_DOCKER = """#!/bin/bash
[[ $1 == version && -s {run}/dockerd.pid ]]
"""


def test_the_started_daemon_keeps_no_descriptor_of_its_caller(tmp_path: Path) -> None:
    fakes, run = tmp_path / "bin", tmp_path / "run"
    fakes.mkdir()
    for name, text in (("dockerd", FAKE_DOCKERD), ("docker", FAKE_DOCKER)):
        (fakes / name).write_text(text.format(folder=tmp_path, run=run))
        (fakes / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}",
           "TFHOST_DOCKER_RUN": str(run), "TFHOST_DOCKER_ROOT": str(tmp_path / "root")}
    with (tmp_path / "caller.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # what `flock caller.lock docker-engine.sh start` holds
        started = subprocess.run([str(ENGINE), "start"], env=env, capture_output=True,
                                 text=True, timeout=60, check=False, pass_fds=(lock.fileno(),))
        inherited = lock.fileno()
    try:
        assert started.returncode == 0, started.stderr
        fds = {int(fd) for fd in (tmp_path / "dockerd-fds").read_text().split()}
        assert inherited not in fds, f"dockerd kept the caller's descriptor {inherited}: {fds}"
        assert fds <= {0, 1, 2, 255}, fds  # stdio, and bash's own for the script it reads
        with (tmp_path / "caller.lock").open("w") as again:  # the lock is free again
            fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        pid = (run / "dockerd.pid").read_text().strip() if (run / "dockerd.pid").exists() else ""
        if pid:
            os.kill(int(pid), signal.SIGTERM)
