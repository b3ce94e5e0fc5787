"""The cpu image, built for real from the Debian base, and its three workloads run in it.

``check``, ``cifar10 --data synthetic`` for a few steps and ``style --weights
random`` at 64 px run through the project's runner (Docker API), as a
non-root uid (1234) and as the calling user; the records are read back from
the mounted results directory and must belong to whoever ran the container.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

from tests.images import image_builds
from tests.images.image_builds import FAKE_WEIGHTS_MD5, run_once
from tests.support.docker_engine import engine_client

pytestmark = [pytest.mark.docker, pytest.mark.slow]

OTHER_UID = 1234


def _run(image: str, command: list[str], results: Path, user: str,
         memlock: int) -> tuple[int, str, str]:
    """Run ``command`` in ``image``; returns (exit code, stdout, stderr), kept apart."""
    from tfhost.runner import RunSpec, run

    out, err = io.StringIO(), io.StringIO()
    spec = RunSpec(image=image, command=command, results_dir=results, user=user,
                   network_mode="none", memlock_bytes=memlock, timeout_s=300)
    return run(spec, out=out, err=err), out.getvalue(), err.getvalue()


def _owned_by(path: Path, uid: int, gid: int) -> None:
    stat = path.stat()
    assert (stat.st_uid, stat.st_gid) == (uid, gid), path


def test_image_metadata(cpu_image: str) -> None:
    attrs = engine_client().images.get(cpu_image).attrs["Config"]
    assert attrs["Entrypoint"] == ["workloads"]
    assert attrs["User"] == "1000:1000"
    assert "/results" in attrs["Volumes"]
    assert attrs["WorkingDir"] == "/results"
    labels = attrs["Labels"]
    assert labels["org.opencontainers.image.title"] == "tfhost workloads (cpu)"
    assert labels["org.opencontainers.image.revision"] == "test"
    assert labels["org.opencontainers.image.base.name"].startswith("tfhost/debian-python:")


def test_host_commands_in_the_image_say_to_run_them_on_the_host(cpu_image: str, memlock: int,
                                                               tmp_path: Path) -> None:
    """`workloads run` inside the image has no engine to drive: one line, exit 2."""
    code, out, err = _run(cpu_image, ["run", "--gpus", "0", "some/image", "--", "check"],
                          tmp_path, f"{os.getuid()}:{os.getgid()}", memlock)
    assert code == 2 and out == ""
    assert err.strip().count("\n") == 0
    assert "drives the host's Docker engine" in err and "run it on the host" in err


def test_vgg19_weights_baked_in_from_the_mirror(cpu_image: str) -> None:
    script = ("import hashlib, os; p = os.environ['WORKLOADS_CACHE'] + "
              "'/vgg19/vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5'; "
              "print(hashlib.md5(open(p, 'rb').read()).hexdigest())")
    out = run_once(cpu_image, ["-c", script], entrypoint="python3", user="1234:1234")
    assert out.strip() == FAKE_WEIGHTS_MD5


def test_check_cifar10_and_style_as_another_user(cpu_image: str, memlock: int,
                                                 tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    os.chown(results, OTHER_UID, OTHER_UID)  # as if user 1234 had made it
    user = f"{OTHER_UID}:{OTHER_UID}"

    code, out, err = _run(cpu_image, ["check", "--json"], results, user, memlock)
    assert code == 0, err
    report = json.loads(out)  # stdout alone: the notes go to stderr
    assert "no GPU visible" in err
    assert report["ok"] is True and report["matmul"][0]["device"] == "/CPU:0"

    code, out, err = _run(cpu_image, ["cifar10", "--data", "synthetic", "--epochs", "2",
                                 "--steps-per-epoch", "3", "--batch-size", "16",
                                 "--output", "/results/cifar10.json"], results, user, memlock)
    assert code == 0, out + err
    record = json.loads((results / "cifar10.json").read_text())
    assert record["workload"] == "cifar10" and record["status"] == "ok"
    assert record["replicas"] == 1 and record["global_batch_size"] == 16
    assert len(record["epoch_times_s"]) == 2 and record["examples_per_sec"] > 0
    assert record["env"]["in_container"] is True

    code, out, err = _run(cpu_image, ["style", "--weights", "random", "--width", "64",
                                 "--iterations", "5", "--output", "/results/style.png"],
                     results, user, memlock)
    assert code == 0, out + err
    style = json.loads((results / "style.json").read_text())
    assert style["workload"] == "style" and style["status"] == "ok"
    from PIL import Image

    with Image.open(results / "style.png") as image:
        assert image.width == 64

    written = sorted(p.name for p in results.iterdir())
    assert written == ["cifar10.json", "records.jsonl", "style.json", "style.png"]
    for path in results.iterdir():
        _owned_by(path, OTHER_UID, OTHER_UID)


def test_records_belong_to_the_calling_user(cpu_image: str, memlock: int, tmp_path: Path) -> None:
    from tfhost.runner import calling_user

    results = tmp_path / "mine"
    code, out, err = _run(cpu_image, ["cifar10", "--epochs", "1", "--steps-per-epoch", "2",
                                 "--batch-size", "8", "--output", "/results/run.json"],
                     results, calling_user(), memlock)
    assert code == 0, out + err
    for path in (results, results / "run.json", results / "records.jsonl"):
        _owned_by(path, os.getuid(), os.getgid())


def test_touching_a_workload_rebuilds_only_the_source_layers(cpu_image: str,
                                                             debian_python_image: str,
                                                             tmp_path: Path) -> None:
    """Layer order: a change under workloads/ re-runs only the source copy and the offline
    install of the package; the dependencies, the VGG19 bake and the user come from the
    cache (BuildKit logs them CACHED). The rebuild's time is in the session's build report."""
    ran = image_builds.rebuild_after_touching_a_workload(
        image_builds.DOCKERFILE, image_builds.TAG, debian_python_image, tmp_path)
    image_builds.assert_only_the_source_layers_ran(ran)
