"""Build the images for the tests, the way a site behind a TLS proxy would.

The build context is the repository as ``.dockerignore`` filters it (what
``docker build .`` sends), plus the host's CA bundle as
``images/build-ca/host.crt``: this machine reaches PyPI only through a
TLS-inspecting proxy, exactly the case images/build-ca/ exists for. The base
is the debootstrap image of tests/support (Debian 12 + python3). The VGG19
weights are baked in from a mirror on 127.0.0.1 (WORKLOADS_VGG19_URL), so the
bake step is exercised without the internet. The engine keeps its layer cache
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
import io
import tarfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.loopback_http import base_url, loopback_server

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = "images/cpu/Dockerfile"
TAG = "tfhost/workloads:cpu-test"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
DOCKERD_PIDFILE = Path("/run/tfhost-docker/dockerd.pid")
FAKE_WEIGHTS = b"stand-in for vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5\n"
FAKE_WEIGHTS_MD5 = hashlib.md5(FAKE_WEIGHTS, usedforsecurity=False).hexdigest()
MIRROR_PORT = 38719
# Build time of the last build in this session, for the report (cold vs warm).
BUILD_SECONDS: dict[str, float] = {}


def context_tar(extra: dict[str, bytes] | None = None) -> io.BytesIO:
    """The repository filtered by .dockerignore, as docker-py would send it, plus ``extra``."""
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel in sorted(exclude_paths(str(REPO), patterns)):
            tar.add(REPO / rel, arcname=rel, recursive=False)
        for name, data in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


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


def build(dockerfile: str, tag: str, context: io.BytesIO, buildargs: dict[str, str]) -> str:
    """Build ``dockerfile`` from ``context`` on the engine (host network); returns ``tag``."""
    import docker

    client = docker.from_env()
    try:
        previous = client.images.get(tag).id
    except docker.errors.ImageNotFound:
        previous = None
    log: list[str] = []
    start = time.monotonic()
    stream = client.api.build(
        fileobj=context, custom_context=True, dockerfile=dockerfile, tag=tag,
        buildargs=buildargs, network_mode="host", rm=True, forcerm=True, decode=True,
    )
    for chunk in stream:
        if "error" in chunk:
            tail = "".join(log[-30:])
            raise RuntimeError(f"build of {tag} failed: {chunk['error']}\n{tail}")
        log.append(chunk.get("stream", ""))
    BUILD_SECONDS[tag] = time.monotonic() - start
    if previous and previous != client.images.get(tag).id:
        # The old image would stay behind untagged after every source change; its
        # layers shared with the new one (TensorFlow, dependencies) are kept.
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(previous)
    return tag


def _host_ca() -> dict[str, bytes]:
    return {"images/build-ca/host.crt": HOST_CA.read_bytes()} if HOST_CA.is_file() else {}


def _bake_args(url: str) -> dict[str, str]:
    return {"BAKE_VGG19": "1", "WORKLOADS_VGG19_URL": url,
            "WORKLOADS_VGG19_MD5": FAKE_WEIGHTS_MD5, "REVISION": "test"}


@functools.cache
def build_cpu_image(base: str) -> str:
    """Build (or reuse from the layer cache) the cpu image on ``base``; returns its tag."""
    with weights_mirror() as url:
        return build(DOCKERFILE, TAG, context_tar(_host_ca()),
                     {"BASE_IMAGE": base, **_bake_args(url)})


# A stand-in for NGC's image: TensorFlow installed into the system Python, as NGC has it.
NGC_STANDIN_DOCKERFILE = """\
ARG BASE_IMAGE
FROM ${BASE_IMAGE}
COPY host.crt /tmp/host.crt
RUN PIP_CERT=/tmp/host.crt PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install \\
      --no-cache-dir tensorflow-cpu==2.21.0 && rm /tmp/host.crt
"""
NGC_STANDIN_BASE = "tfhost/ngc-standin-base:test"
NGC_TAG = "tfhost/workloads:ngc-test"


@functools.cache
def build_ngc_on_standin(base: str) -> tuple[str, str]:
    """images/ngc/Dockerfile on a Debian image with a system-wide TensorFlow.

    NGC itself is out of reach; this stand-in has what the ngc Dockerfile relies
    on (TensorFlow in the system site-packages, no virtual environment, Python
    >= 3.11), so its install logic runs for real. Returns (stand-in, image) tags.
    """
    ca = HOST_CA.read_bytes() if HOST_CA.is_file() else b""
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", NGC_STANDIN_DOCKERFILE.encode()), ("host.crt", ca)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    standin = build("Dockerfile", NGC_STANDIN_BASE, context, {"BASE_IMAGE": base})
    with weights_mirror() as url:
        image = build("images/ngc/Dockerfile", NGC_TAG, context_tar(_host_ca()),
                      {"BASE_IMAGE": standin, **_bake_args(url)})
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
    import docker

    container = docker.from_env().containers.create(image, args, entrypoint=entrypoint,
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
