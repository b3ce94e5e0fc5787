"""A pull-only image registry on 127.0.0.1, serving images built here, addressable by digest.

Why: roles pin images as REGISTRY/PATH:TAG@sha256:DIGEST, and Docker runs such a
reference only after pulling it from a registry: an image built or `docker load`ed
locally has no registry digest. NGC is out of reach, so a test builds its stand-in,
`docker save`s it, and serves it here with the registry API's pull side (the /v2/
ping, manifests by tag or digest, blobs), so the host's own dockerd pulls it by digest
exactly as it would pull from nvcr.io. Loopback registries need no TLS: dockerd treats
127.0.0.0/8 as insecure by default. Every request is recorded, so a test can tell a
pull by digest from one by tag.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.support.loopback_http import loopback_server

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar.gzip"


@dataclass(frozen=True)
class Blob:
    path: Path
    size: int


@dataclass
class Repository:
    """One image as the registry serves it: its manifest and the blobs it names."""

    name: str
    tag: str
    manifest: bytes
    blobs: dict[str, Blob]

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.manifest).hexdigest()


@dataclass
class ServedRegistry:
    """The running registry: its host:port, the images it serves and the requests it saw."""

    address: str
    repositories: dict[str, Repository] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reference(self, name: str) -> str:
        """REGISTRY/NAME:TAG@sha256:DIGEST, the pinned form roles take."""
        repository = self.repositories[name]
        return f"{self.address}/{name}:{repository.tag}@{repository.digest}"


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def repository_from_image(image: str, name: str, tag: str, workdir: Path) -> Repository:
    """`docker save IMAGE` (the engine in DOCKER_HOST), its layers gzipped, as a repository."""
    saved = workdir / "image.tar"
    subprocess.run(["docker", "save", "--output", str(saved), image], check=True,
                   capture_output=True, timeout=600)
    blobs: dict[str, Blob] = {}
    with tarfile.open(saved) as archive:
        (entry,) = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        config = archive.extractfile(entry["Config"])
        assert config is not None
        config_path = workdir / "config.json"
        config_path.write_bytes(config.read())
        config_digest = _file_digest(config_path)
        blobs[config_digest] = Blob(config_path, config_path.stat().st_size)
        layers = []
        for index, member in enumerate(entry["Layers"]):
            source = archive.extractfile(member)
            assert source is not None
            layer_path = workdir / f"layer-{index}.tar.gz"
            with gzip.open(layer_path, "wb", compresslevel=1) as target:
                shutil.copyfileobj(source, target, 1 << 20)
            digest = _file_digest(layer_path)
            blobs[digest] = Blob(layer_path, layer_path.stat().st_size)
            layers.append({"mediaType": LAYER_TYPE, "size": blobs[digest].size,
                           "digest": digest})
    saved.unlink()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "size": blobs[config_digest].size,
                   "digest": config_digest},
        "layers": layers}, indent=3).encode()
    return Repository(name, tag, manifest, blobs)


_PATH = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


def _handler(registry: ServedRegistry) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Requests go to registry.requests, not to stderr."""

        def _answer(self, body: bool) -> None:
            with registry.lock:
                registry.requests.append(f"{self.command} {self.path}")
            if self.path.rstrip("/") == "/v2":
                self._send(200, b"{}", "application/json", body)
                return
            match = _PATH.match(self.path)
            repository = registry.repositories.get(match["name"]) if match else None
            if match is None or repository is None:
                self._send(404, b'{"errors":[{"code":"NAME_UNKNOWN"}]}', "application/json", body)
                return
            ref = match["ref"]
            if match["kind"] == "manifests":
                if ref not in (repository.tag, repository.digest):
                    self._send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}',
                               "application/json", body)
                    return
                self._send(200, repository.manifest, MANIFEST_TYPE, body,
                           digest=repository.digest)
                return
            blob = repository.blobs.get(ref)
            if blob is None:
                self._send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}', "application/json", body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(blob.size))
            self.send_header("Docker-Content-Digest", ref)
            self.end_headers()
            if body:
                with blob.path.open("rb") as source:
                    shutil.copyfileobj(source, self.wfile, 1 << 20)

        def _send(self, status: int, payload: bytes, content_type: str, body: bool,
                  digest: str = "") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Docker-Distribution-API-Version", "registry/2.0")
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if body:
                self.wfile.write(payload)

        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

    return Handler


@contextmanager
def image_registry() -> Iterator[ServedRegistry]:
    """A registry on 127.0.0.1 for the length of the block; add repositories to serve."""
    registry = ServedRegistry(address="")
    with loopback_server(_handler(registry), name="image-registry") as server:
        registry.address = f"127.0.0.1:{server.server_address[1]}"
        yield registry
