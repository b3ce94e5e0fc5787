"""The Docker-API runner against the real engine and the cpu image.

GPU requests are checked where they can be on a machine without GPUs: in the
created (not started) container's HostConfig, and in the start that must fail
with one line naming the missing NVIDIA Container Toolkit.
"""

from __future__ import annotations

import io
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.host import tfhost_cli

pytestmark = pytest.mark.docker


def _client() -> Any:
    import docker

    return docker.from_env()


def _leftovers() -> list[Any]:
    from tfhost.runner import LABEL

    return _client().containers.list(all=True, filters={"label": LABEL})


@pytest.fixture
def created(cpu_image: str, tmp_path: Path) -> Any:
    """Create containers from specs; remove them after the test."""
    from tfhost.runner import create, remove

    made: list[Any] = []

    def make(**fields: Any) -> dict[str, Any]:
        from tfhost.runner import RunSpec

        container = create(_client(), RunSpec(image=cpu_image, **fields))
        made.append(container)
        container.reload()
        return dict(container.attrs)

    yield make
    for container in made:
        remove(container)


def test_all_gpus_request_in_host_config(created: Any, tmp_path: Path) -> None:
    from tfhost.runner import calling_user

    attrs = created(command=["check"], gpus="all", results_dir=tmp_path / "r",
                    environment={"A": "1"})
    host = attrs["HostConfig"]
    assert host["DeviceRequests"] == [
        {"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}
    ]
    assert host["ShmSize"] == 1 << 30
    assert sorted(host["Ulimits"], key=lambda u: u["Name"]) == [
        {"Name": "memlock", "Soft": -1, "Hard": -1},
        {"Name": "stack", "Soft": 67108864, "Hard": 67108864},
    ]
    assert host["NetworkMode"] == "default"  # not the host's network unless asked
    assert host["Init"] is True
    assert host["Binds"] == [f"{(tmp_path / 'r').resolve()}:/results:rw"]
    assert attrs["Config"]["User"] == calling_user()
    assert "A=1" in attrs["Config"]["Env"]
    assert attrs["Config"]["Cmd"] == ["check"]


def test_chosen_gpus_request_in_host_config(created: Any) -> None:
    attrs = created(command=["check"], gpus=("0", "2"), network_mode="none")
    request = attrs["HostConfig"]["DeviceRequests"]
    assert request == [
        {"Driver": "", "Count": 0, "DeviceIDs": ["0", "2"], "Capabilities": [["gpu"]],
         "Options": {}}
    ]
    assert attrs["HostConfig"]["NetworkMode"] == "none"


def test_least_privilege_in_host_config(created: Any) -> None:
    """No capability, no privilege gain, and the host's network only when asked for."""
    for asked, expected in ((None, "default"), ("none", "none"), ("host", "host")):
        host = created(command=["check"], network_mode=asked)["HostConfig"]
        assert host["CapDrop"] == ["ALL"]
        assert not host["CapAdd"]
        assert host["SecurityOpt"] == ["no-new-privileges"]
        assert host["Privileged"] is False
        assert host["NetworkMode"] == expected


def test_cli_uses_the_host_network_only_when_asked(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    import tfhost.runner

    seen: list[Any] = []

    def fake_run(spec: Any, **_: Any) -> int:
        seen.append(spec)
        return 0

    monkeypatch.setattr(tfhost.runner, "run", fake_run)
    base = ["run", "img", "--gpus", "none", "--results", str(tmp_path)]
    assert tfhost_cli.run_in_process([*base, "--", "check"]) == 0
    assert tfhost_cli.run_in_process([*base, "--network", "host", "--", "check"]) == 0
    assert [spec.network_mode for spec in seen] == [None, "host"]


def test_no_gpu_means_no_device_request(created: Any) -> None:
    assert not created(command=["check"])["HostConfig"]["DeviceRequests"]


def test_gpu_request_without_toolkit_fails_in_one_line(cpu_image: str, tmp_path: Path) -> None:
    result = tfhost_cli.run_process(["run", cpu_image, "--gpus", "all", "--network", "none",
                                     "--results", str(tmp_path), "--", "check"])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "has no NVIDIA Container Toolkit" in lines[0]
    assert "nvidia-ctk runtime configure" in lines[0]
    assert _leftovers() == []
    assert list(tmp_path.iterdir()) == []  # the monitor left no CSV behind


def test_exit_code_and_log_come_back(cpu_image: str, memlock: int, tmp_path: Path) -> None:
    from tfhost.runner import RunSpec, run

    out, err = io.StringIO(), io.StringIO()
    spec = RunSpec(image=cpu_image, command=["cifar10", "--batch-size", "0"],
                   network_mode="none", memlock_bytes=memlock, results_dir=tmp_path)
    assert run(spec, out=out, err=err) == 2
    assert "--batch-size: must be > 0" in err.getvalue()
    assert out.getvalue() == ""
    out = io.StringIO()
    assert run(RunSpec(image=cpu_image, command=["--version"], network_mode="none",
                       memlock_bytes=memlock), out=out) == 0
    assert out.getvalue().strip() == "workloads 0.1.0"
    assert _leftovers() == []


class RunningProbe(io.StringIO):
    """Notes, for each write, whether the runner's container was still running."""

    def __init__(self) -> None:
        super().__init__()
        self.while_running: list[tuple[str, bool]] = []

    def write(self, text: str) -> int:
        if text:
            from tfhost.runner import LABEL

            running = bool(_client().containers.list(filters={"label": LABEL}))
            self.while_running.append((text, running))
        return super().write(text)


@pytest.mark.slow
def test_log_streams_while_the_container_runs(cpu_image: str, memlock: int,
                                              tmp_path: Path) -> None:
    from tfhost.runner import RunSpec, run

    probe = RunningProbe()
    spec = RunSpec(image=cpu_image, network_mode="none", memlock_bytes=memlock,
                   results_dir=tmp_path,
                   command=["cifar10", "--epochs", "3", "--steps-per-epoch", "3",
                            "--batch-size", "8", "--output", "/results/r.json"])
    assert run(spec, out=probe, err=probe) == 0
    first_epoch = [running for text, running in probe.while_running if "epoch 1:" in text]
    assert first_epoch == [True], probe.while_running
    assert (tmp_path / "r.json").is_file()
    assert _leftovers() == []


@pytest.mark.slow
def test_time_limit_stops_and_removes_the_container(cpu_image: str, memlock: int,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from tfhost.runner import TIMEOUT_EXIT_CODE, RunSpec, run

    spec = RunSpec(image=cpu_image, network_mode="none", memlock_bytes=memlock, timeout_s=3,
                   command=["cifar10", "--epochs", "50", "--steps-per-epoch", "100",
                            "--batch-size", "8", "--output", "/tmp/r.json"])
    assert run(spec, out=io.StringIO()) == TIMEOUT_EXIT_CODE
    assert "time limit of 3 s reached" in capsys.readouterr().err
    assert _leftovers() == []


@pytest.mark.slow
def test_ctrl_c_removes_the_container(cpu_image: str, memlock: int) -> None:
    from tfhost.runner import LABEL

    process = subprocess.Popen(
        tfhost_cli.command(["run", cpu_image, "--network", "none", "--memlock", str(memlock),
                            "--", "cifar10", "--epochs", "50", "--steps-per-epoch", "100",
                            "--batch-size", "8", "--output", "/tmp/r.json"]),
        env=tfhost_cli.environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(300):  # the container appears within seconds
            if _client().containers.list(filters={"label": LABEL, "status": "running"}):
                break
            time.sleep(0.1)
        else:
            pytest.fail("the container never started")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted" in err
    assert _leftovers() == []


def test_missing_image_is_one_line(tmp_path: Path, docker_host: str) -> None:
    result = tfhost_cli.run_process(["run", "tfhost/no-such-image:1", "--gpus", "none", "--",
                                     "check"])
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "workloads run: error: image tfhost/no-such-image:1 is not on this Docker engine; "
        "build it (docker compose build cpu, see images/README.md) or pull it"
    )


def test_memlock_refused_by_the_engine_is_explained(cpu_image: str, memlock: int) -> None:
    if memlock == -1:
        pytest.skip("this engine may raise RLIMIT_MEMLOCK to unlimited")
    result = tfhost_cli.run_process(["run", cpu_image, "--gpus", "none", "--network", "none",
                                     "--", "--version"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "may not raise the locked-memory limit to unlimited" in result.stderr
    assert "--memlock BYTES" in result.stderr
    assert _leftovers() == []


def test_engine_not_answering_is_one_line(tmp_path: Path) -> None:
    sock = tmp_path / "nothing.sock"
    result = tfhost_cli.run_process(["run", "img", "--gpus", "none", "--", "check"],
                                    env={"DOCKER_HOST": f"unix://{sock}"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "no Docker engine answers at " in result.stderr
    assert f"{sock.name} (" in result.stderr  # a long path keeps its end


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpus", "0,x"], "'x' is not a GPU index or UUID"),
        (["--gpus", "1,1"], "names a GPU twice"),
        (["--env", "1BAD=x"], "'1BAD' is not a variable name"),
        (["--env", "TFHOST_TEST_UNSET_VAR"], "TFHOST_TEST_UNSET_VAR is not set in this shell"),
        (["--timeout", "0"], "--timeout: must be > 0"),
        (["--memlock", "lots"], "neither 'unlimited' nor bytes"),
    ],
)
def test_bad_options_are_one_line(argv: list[str], message: str) -> None:
    result = tfhost_cli.run_process(["run", "img", *argv, "--", "check"],
                                    env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr


def test_bare_env_key_passes_the_value_without_showing_it(created: Any,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from tfhost.commands.common import environment

    monkeypatch.setenv("NGC_API_KEY", "s3cret-value")
    env = environment(["NGC_API_KEY", "MODE=fast"])
    attrs = created(command=["check"], environment=env)
    assert "NGC_API_KEY=s3cret-value" in attrs["Config"]["Env"]
    assert "MODE=fast" in attrs["Config"]["Env"]


def test_unwritable_results_directory(tmp_path: Path) -> None:
    from tfhost.runner import RunSpec, create

    from workloads.errors import WorkloadError

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(WorkloadError, match="cannot create the results directory"):
        create(None, RunSpec(image="img", results_dir=blocker / "results"))


def test_removal_takes_the_anonymous_results_volume_along(cpu_image: str, memlock: int) -> None:
    """Like ``docker run --rm``: a run without --results leaves no volume behind."""
    import docker
    from tfhost.runner import RunSpec, create, follow, remove, start

    spec = RunSpec(image=cpu_image, command=["--version"], network_mode="none",
                   memlock_bytes=memlock)
    container = create(_client(), spec)
    start(container, spec)
    assert follow(container, spec, io.StringIO(), io.StringIO()) == 0
    container.reload()
    volumes = [m["Name"] for m in container.attrs["Mounts"] if m["Type"] == "volume"]
    assert len(volumes) == 1  # the image's VOLUME /results
    remove(container)
    with pytest.raises(docker.errors.NotFound):
        _client().volumes.get(volumes[0])
