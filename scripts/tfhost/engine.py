"""Connect to the Docker engine, or say in one line why not and what to do.

``docker.from_env()`` reads ``DOCKER_HOST`` (the project's private engine in CI,
the system socket on a provisioned host). A missing engine surfaces there as a
long ``DockerException`` chain; users need the socket and the fix instead.
"""

from __future__ import annotations

import os
from typing import Any

from workloads.errors import WorkloadError


def connect() -> Any:
    """A ``docker.DockerClient`` for ``DOCKER_HOST``, checked with a ping."""
    import docker

    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise WorkloadError(
            f"no Docker engine answers at {where} ({_short(exc)})",
            "start dockerd (systemctl start docker) or set DOCKER_HOST to a running engine",
        ) from exc
    return client


def _short(exc: BaseException) -> str:
    """The innermost reason of a docker-py error chain, on one line."""
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    text = " ".join(str(exc).split())
    return text[:200] or type(exc).__name__
