"""Build the images for the tests, the way a site behind a TLS proxy would.

The builds run through BuildKit (the Docker CLI; docker-py speaks only the
classic builder, which knows neither secret nor cache mounts), from the
repository as ``.dockerignore`` filters it, with the host's CA bundle passed as
the secret ``build-ca``: this machine reaches PyPI only through a
TLS-inspecting proxy, exactly the case that secret exists for. The bundle
carries ``CA_MARKER``, so a test can prove that no layer holds it. pip's
downloads live in the cache mount ``tfhost-pip`` of the engine, shared by the
builds of one run (tensorflow's wheels are fetched once). The base is the
debootstrap image of tests/support (Debian 12 + python3). The VGG19 weights
are baked in from a mirror on 127.0.0.1 (WORKLOADS_VGG19_URL), so the bake
step is exercised without the internet. The engine keeps its layer cache
between runs: a rebuild after a source change redoes only the last layers. The
ngc Dockerfile is built on a stand-in for NGC's image (see build_ngc_on_standin).

Also: the engine's hard RLIMIT_MEMLOCK. In this sandbox dockerd may not raise
locked memory to unlimited (no CAP_SYS_RESOURCE), so runs pass the engine's
own hard limit; on a GPU host the default (unlimited) applies.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.docker_engine import engine_client
from tests.support.loopback_http import base_url, loopback_server

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "images/cpu/Dockerfile"
# Tags carry a hash of the checkout's path: two checkouts sharing one engine (several
# developers on one machine) must not replace, and then delete, each other's images.
CHECKOUT = hashlib.sha256(str(REPO).encode()).hexdigest()[:8]
TAG = f"tfhost/workloads:cpu-test-{CHECKOUT}"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
DOCKERD_PIDFILE = Path("/run/tfhost-docker/dockerd.pid")
FAKE_WEIGHTS = b"stand-in for vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5\n"
FAKE_WEIGHTS_MD5 = hashlib.md5(FAKE_WEIGHTS, usedforsecurity=False).hexdigest()
MIRROR_PORT = 38719
# A comment line in the CA secret: harmless to TLS, easy to look for in a layer.
CA_MARKER = b"# tfhost build-ca secret: must never appear in an image layer"
PIP_TAG = f"tfhost/workloads:pip-test-{CHECKOUT}"
PIP_DOCKERFILE = "images/pip/Dockerfile"
# Build time of the last build in this session, for the report (cold vs warm).
BUILD_SECONDS: dict[str, float] = {}
# BuildKit's plain-progress log of that build: which steps ran and which were CACHED.
BUILD_LOGS: dict[str, str] = {}


@contextmanager
def weights_mirror() -> Iterator[str]:
    """An HTTP server on 127.0.0.1 serving the stand-in weights file; yields its URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(FAKE_WEIGHTS)))
            self.end_headers()
            self.wfile.write(FAKE_WEIGHTS)

        def log_message(self, *args: object) -> None:  # keep the test output clean
            pass

    # A fixed port keeps the URL, and so the bake layer's cache key, the same; if it is
    # taken any port works, and the bake layer is just rebuilt.
    with loopback_server(Handler, MIRROR_PORT, 0, name="weights-mirror") as server:
        yield f"{base_url(server)}/vgg19.h5"


def buildkit_command() -> list[str]:
    """A Docker CLI that builds with BuildKit: ``buildx`` where installed, else a CLI
    older than 23 (Debian 12's docker.io), whose own ``build`` uses BuildKit when
    DOCKER_BUILDKIT=1; newer CLIs without buildx can no longer do that."""
    for docker in dict.fromkeys(filter(None, (shutil.which("docker"), "/usr/bin/docker"))):
        probe = subprocess.run([docker, "buildx", "version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return [docker, "buildx", "build"]
        version = subprocess.run([docker, "version", "--format", "{{.Client.Version}}"],
                                 capture_output=True, text=True, check=False).stdout
        major = re.match(r"(\d+)\.", version.strip())
        if major and int(major.group(1)) < 23:
            return [docker, "build"]
    raise RuntimeError("no Docker CLI with BuildKit: install docker-buildx, or Debian's docker.io")


@contextmanager
def ca_secret() -> Iterator[Path]:
    """The host's CA bundle plus CA_MARKER, in a private temporary file."""
    data = (HOST_CA.read_bytes() if HOST_CA.is_file() else b"") + b"\n" + CA_MARKER + b"\n"
    with tempfile.TemporaryDirectory(prefix="tfhost-build-ca.") as folder:
        path = Path(folder) / "build-ca.pem"
        path.write_bytes(data)
        path.chmod(0o600)
        yield path


# The last modification time given to a private Dockerfile copy (ns), so each is newer.
_LAST_DOCKERFILE_MTIME = [0]


@contextmanager
def private_dockerfile(path: Path) -> Iterator[Path]:
    """A copy of the Dockerfile at ``path`` with a modification time no copy had before.

    Why: BuildKit keeps the Dockerfile it was last sent for a context (the Docker CLI
    names that cache by the context's directory), and sends it again only when its
    size or modification time changed. A fresh clone gives every file the same time,
    so after building images/ngc/Dockerfile, ``-f images/pip/Dockerfile`` of the same
    size built the ngc file again, under the pip tag. A copy whose time is newer than
    every earlier one is always sent.
    """
    with tempfile.TemporaryDirectory(prefix="tfhost-dockerfile.") as folder:
        copy = Path(folder) / path.name
        shutil.copyfile(path, copy)
        stamp = max(time.time_ns(), _LAST_DOCKERFILE_MTIME[0] + 1_000_000_000)
        _LAST_DOCKERFILE_MTIME[0] = stamp
        os.utime(copy, ns=(stamp, stamp))
        yield copy


def build(dockerfile: str, tag: str, buildargs: dict[str, str],
          context: Path = REPO) -> str:
    """Build ``dockerfile`` (relative to ``context``) with BuildKit on the engine; returns ``tag``.

    Host network (the engine has no bridge); the CA bundle as the ``build-ca`` secret.
    """
    import docker

    client = engine_client()
    try:
        previous = client.images.get(tag).id
    except docker.errors.ImageNotFound:
        previous = None
    with ca_secret() as secret, private_dockerfile(context / dockerfile) as private:
        command = [*buildkit_command(), "--progress=plain", "--network", "host",
                   "--secret", f"id=build-ca,src={secret}", "-f", str(private),
                   "-t", tag]
        for name, value in buildargs.items():
            command += ["--build-arg", f"{name}={value}"]
        start = time.monotonic()
        result = subprocess.run([*command, str(context)], capture_output=True, text=True,
                                check=False, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-40:])
        raise RuntimeError(f"build of {tag} failed (exit {result.returncode}):\n{tail}")
    BUILD_SECONDS[tag] = time.monotonic() - start
    BUILD_LOGS[tag] = result.stderr + result.stdout
    if previous and previous != client.images.get(tag).id:
        # The old image would stay behind untagged after every source change; its
        # layers shared with the new one (TensorFlow, dependencies) are kept.
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(previous)
    return tag


def steps_run(log: str) -> list[str]:
    """The Dockerfile steps a BuildKit build executed, from its plain-progress log: every
    ``#N [stage i/n] STEP`` whose vertex N was not reported ``CACHED`` (FROM lines aside)."""
    steps = dict(re.findall(r"^#(\d+) \[[^\]]*\d+/\d+\] (.+)$", log, re.MULTILINE))
    cached = set(re.findall(r"^#(\d+) CACHED$", log, re.MULTILINE))
    return [step.strip() for number, step in steps.items()
            if number not in cached and not step.startswith("FROM ")]


def rebuild_after_touching_a_workload(dockerfile: str, tag: str, base: str,
                                      scratch: Path) -> list[str]:
    """Rebuild ``dockerfile`` on a copy of the context with one workload file changed; return
    the steps BuildKit ran (the rest came from the cache). The tag built here is removed."""
    context = scratch / "context"
    for name in ("pyproject.toml", "README.md", "requirements", "workloads", "scripts/tfhost",
                 "images"):
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, context / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (context / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, context / name)
    shutil.copy(REPO / ".dockerignore", context / ".dockerignore")
    with (context / "workloads" / "cifar10" / "train.py").open("a") as fh:
        # Unique per run: BuildKit keeps the layers of an earlier touched build in its
        # cache, and the same change would come back from there.
        fh.write(f"# touched by the layer-order test {uuid.uuid4()}\n")
    touched = f"{tag}-touched"
    try:
        with weights_mirror() as url:
            build(dockerfile, touched, {"BASE_IMAGE": base, **bake_args(url)}, context=context)
        return steps_run(BUILD_LOGS[touched])
    finally:
        import docker

        with contextlib.suppress(docker.errors.ImageNotFound):
            engine_client().images.remove(touched)


def assert_only_the_source_layers_ran(ran: list[str]) -> None:
    """The first step a rebuild ran is the copy of workloads/: the base, the locked
    dependencies, the VGG19 bake and the user all came from the cache. Steps after it
    (the offline install, WORKDIR) re-run, as every step after a changed layer does."""
    assert ran, "nothing was rebuilt: the touched file did not reach the image"
    assert ran[0] == "COPY workloads /tmp/src/workloads", ran
    assert any(step.endswith("install-workloads /tmp/src") for step in ran), ran
    expensive = ("install-deps", "bake-vgg19", "add-user", "requirements")
    assert not [step for step in ran if any(word in step for word in expensive)], ran


def bake_args(url: str) -> dict[str, str]:
    return {"BAKE_VGG19": "1", "WORKLOADS_VGG19_URL": url,
            "WORKLOADS_VGG19_MD5": FAKE_WEIGHTS_MD5, "REVISION": "test"}


@functools.cache
def build_cpu_image(base: str) -> str:
    """Build (or reuse from the layer cache) the cpu image on ``base``; returns its tag."""
    with weights_mirror() as url:
        return build(DOCKERFILE, TAG, {"BASE_IMAGE": base, **bake_args(url)})


@functools.cache
def build_pip_image(base: str) -> str:
    """The pip image (real tensorflow[and-cuda] and NVIDIA wheels) on ``base``; returns its tag."""
    with weights_mirror() as url:
        return build(PIP_DOCKERFILE, PIP_TAG, {"BASE_IMAGE": base, **bake_args(url)})


# A stand-in for NGC's image, with what images/ngc/Dockerfile relies on: TensorFlow built
# for CUDA (the CUDA build of the same wheel: import and build info as NGC's, no GPU code
# runs here) in the system Python's site-packages, no virtual environment, pip usable as
# root, NGC's working directory /workspace and Ubuntu's user `ubuntu` at uid 1000, which
# add-user must replace. Tagged with NGC's own name in the test only.
NGC_STANDIN_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
RUN --mount=type=cache,id=tfhost-pip,target=/root/.cache/pip,sharing=locked \\
    --mount=type=secret,id=build-ca \\
    PIP_CERT=/run/secrets/build-ca PIP_BREAK_SYSTEM_PACKAGES=1 \\
      python3 -m pip install tensorflow==2.21.0 \\
 && useradd --uid 1000 --user-group --create-home ubuntu \\
 && mkdir /workspace
WORKDIR /workspace
"""
NGC_STANDIN_BASE = "nvcr.io/nvidia/tensorflow:25.02-tf2-py3"
NGC_TAG = f"tfhost/workloads:ngc-test-{CHECKOUT}"


@functools.cache
def build_ngc_on_standin(base: str) -> tuple[str, str]:
    """images/ngc/Dockerfile on the stand-in, through its real BASE_IMAGE argument.

    NGC itself is out of reach; the stand-in (NGC_STANDIN_DOCKERFILE) has what the
    ngc Dockerfile relies on, so its install logic runs for real. Returns
    (stand-in, image) tags.
    """
    with tempfile.TemporaryDirectory(prefix="tfhost-ngc-standin.") as folder:
        (Path(folder) / "Dockerfile").write_text(NGC_STANDIN_DOCKERFILE)
        standin = build("Dockerfile", NGC_STANDIN_BASE, {"BASE_IMAGE": base},
                        context=Path(folder))
    with weights_mirror() as url:
        image = build("images/ngc/Dockerfile", NGC_TAG,
                      {"BASE_IMAGE": standin, **bake_args(url)})
    return standin, image


def engine_memlock_limit() -> int:
    """The private engine's hard RLIMIT_MEMLOCK in bytes, -1 when unlimited."""
    pid = DOCKERD_PIDFILE.read_text().strip()
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max locked memory"):
            hard = line.split()[4]
            return -1 if hard == "unlimited" else int(hard)
    return -1


def run_once(image: str, args: list[str], entrypoint: str | None = None, **options: Any) -> str:
    """Run a container to the end and return its stdout; removed with its volumes after.

    Stdout alone: a warning on stderr must not end up inside a value the test parses.
    (``containers.run(remove=True)`` would leave the anonymous /results volume behind.)
    """
    container = engine_client().containers.create(image, args, entrypoint=entrypoint,
                                                    network_mode="none", **options)
    try:
        container.start()
        code = container.wait()["StatusCode"]
        output = bytes(container.logs(stdout=True, stderr=False)).decode()
        if code != 0:
            errors = bytes(container.logs(stdout=False, stderr=True)).decode()
            raise RuntimeError(f"{image} {args} exited {code}: {(output + errors)[-2000:]}")
        return output
    finally:
        container.remove(force=True, v=True)
