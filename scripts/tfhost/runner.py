"""``docker run`` for the benchmark images, through the Docker API.

The container gets what seed 001 passed on the command line
(``--gpus all --shm-size=1g --ulimit memlock=-1 --ulimit stack=67108864``):
GPUs through a ``DeviceRequest`` (what ``--gpus`` becomes in the API), a 1 GiB
``/dev/shm`` for the input pipeline, unlimited locked memory for pinned host
buffers and a 64 MiB stack. The results directory is mounted at ``/results``
and the container runs as the calling user, so the records it writes belong to
whoever started the run. Its log is streamed live; the container is removed
when it ends, when the time limit stops it, and on Ctrl-C.

Least privilege: the workloads need no Linux capability (they run as an
ordinary uid, write only to the mounted results directory, and the GPUs come
through the device request, not through a capability), so every capability is
dropped and ``no-new-privileges`` stops a setuid binary in the image from
regaining any. The network is the engine's default (an isolated namespace with
outbound access, for dataset and weight downloads) unless the caller asks for
another: ``host`` shares the host's network stack, its loopback services
included, and so is used only when asked for.

The acceptance battery's ``errors`` check reads this boot's kernel log for XIDs.
A container cannot read the host's journal, and the kernel's ring buffer (dmesg,
/dev/kmsg) needs CAP_SYSLOG wherever ``kernel.dmesg_restrict`` is set (Debian's
and Ubuntu's default) — a capability Docker would give the container's root
only, never the ordinary uid the workloads run as, and one that also allows
clearing the buffer. So for ``accept`` the host side saves the log (as the
calling user: root, or a member of adm or systemd-journal) and the container
gets that one file, read-only, at ``/kernel.log`` (``kernel_log``): no
capability and no device are added.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from workloads import safefs
from workloads.errors import WorkloadError, clip

RESULTS_MOUNT = "/results"
KERNEL_LOG_MOUNT = "/kernel.log"
SHM_SIZE = "1g"
MEMLOCK_UNLIMITED = -1
STACK_BYTES = 67108864
LABEL = "tfhost.runner"
TIMEOUT_EXIT_CODE = 124  # what coreutils `timeout` returns, so scripts can tell
STOP_GRACE_S = 10
# No capability is needed by any workload (see the module docstring).
CAP_DROP = ("ALL",)
SECURITY_OPT = ("no-new-privileges",)

# What dockerd answers when a GPU is requested and no NVIDIA runtime hook is
# installed: "could not select device driver "" with capabilities: [[gpu]]".
_NO_GPU_DRIVER = re.compile(r"could not select device driver|unknown or invalid runtime name")
# What runc answers when the engine may not raise RLIMIT_MEMLOCK (type 8) that high.
_MEMLOCK_REFUSED = re.compile(r"setting rlimit type 8|rlimit.*memlock", re.IGNORECASE)
_DEVICE_ID = re.compile(r"^(\d+|GPU-[0-9a-fA-F-]+|MIG-[0-9a-zA-Z/-]+)$")

AllGpus = Literal["all"]
Gpus = AllGpus | tuple[str, ...] | None


def parse_gpus(text: str | None) -> Gpus:
    """``all`` → every GPU; ``0,2`` (indices or GPU-/MIG- UUIDs) → those; ``none``/None → no GPU."""
    if text is None or text.strip().lower() in {"", "none"}:
        return None
    if text.strip().lower() == "all":
        return "all"
    ids = tuple(part.strip() for part in text.split(","))
    bad = [part for part in ids if not _DEVICE_ID.match(part)]
    if bad:
        raise WorkloadError(
            f"--gpus {text!r}: {', '.join(repr(b) for b in bad)} is not a GPU index or UUID",
            "use --gpus all, or a comma-separated list such as --gpus 0,1 (see nvidia-smi -L)",
        )
    if len(set(ids)) != len(ids):
        raise WorkloadError(f"--gpus {text!r} names a GPU twice", "list each GPU once")
    return ids


def device_requests(gpus: Gpus) -> list[Any]:
    """The API form of ``--gpus``: one request for the ``gpu`` capability."""
    from docker.types import DeviceRequest

    if gpus is None:
        return []
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    return [DeviceRequest(device_ids=list(gpus), capabilities=[["gpu"]])]


def calling_user() -> str:
    """``uid:gid`` of this process: files in the mounted results directory become ours."""
    return f"{os.getuid()}:{os.getgid()}"


@dataclass(frozen=True)
class RunSpec:
    """Everything one container run needs; the defaults are seed 001's flags."""

    image: str
    command: Sequence[str] = ()
    gpus: Gpus = None
    results_dir: Path | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    network_mode: str | None = None  # None: the engine's default network
    user: str | None = field(default_factory=calling_user)
    timeout_s: float | None = None
    shm_size: str = SHM_SIZE
    memlock_bytes: int = MEMLOCK_UNLIMITED
    name: str | None = None
    kernel_log: Path | None = None  # a saved kernel log, mounted read-only at /kernel.log


def container_options(spec: RunSpec) -> dict[str, Any]:
    """Keyword arguments of ``client.containers.create`` for ``spec``."""
    from docker.types import Ulimit

    options: dict[str, Any] = {
        "command": list(spec.command),
        "device_requests": device_requests(spec.gpus),
        "shm_size": spec.shm_size,
        "ulimits": [
            Ulimit(name="memlock", soft=spec.memlock_bytes, hard=spec.memlock_bytes),
            Ulimit(name="stack", soft=STACK_BYTES, hard=STACK_BYTES),
        ],
        "environment": dict(spec.environment),
        "cap_drop": list(CAP_DROP),
        "security_opt": list(SECURITY_OPT),
        "init": True,  # docker-init forwards SIGTERM, so a stop ends the run promptly
        "labels": {LABEL: "1"},
    }
    if spec.network_mode:
        options["network_mode"] = spec.network_mode
    if spec.user:
        options["user"] = spec.user
    if spec.name:
        options["name"] = spec.name
    volumes: dict[str, dict[str, str]] = {}
    if spec.results_dir is not None:
        volumes[str(Path(spec.results_dir).resolve())] = {"bind": RESULTS_MOUNT, "mode": "rw"}
    if spec.kernel_log is not None:
        volumes[str(Path(spec.kernel_log).resolve())] = {"bind": KERNEL_LOG_MOUNT, "mode": "ro"}
    if volumes:
        options["volumes"] = volumes
    return options


def create(client: Any, spec: RunSpec) -> Any:
    """Create (not start) the container; image and option problems as one line."""
    import docker

    if spec.results_dir is not None:
        _ensure_results_dir(Path(spec.results_dir))
    try:
        return client.containers.create(spec.image, **container_options(spec))
    except docker.errors.ImageNotFound as exc:
        raise WorkloadError(
            f"image {spec.image} is not on this Docker engine",
            "build it (docker compose build cpu, see images/README.md) or pull it",
        ) from exc
    except docker.errors.APIError as exc:
        raise WorkloadError(
            f"the Docker engine refused to create a container from {spec.image} "
            f"({clip(_explanation(exc), 90)})",
            "check the options (--network, --gpus, --env) and the engine's log",
        ) from exc


def start(container: Any, spec: RunSpec) -> None:
    """Start ``container``; a GPU request without the NVIDIA runtime gets its own message."""
    import docker

    try:
        container.start()
    except docker.errors.APIError as exc:
        reason = _explanation(exc)
        if spec.gpus is not None and _NO_GPU_DRIVER.search(reason):
            raise WorkloadError(
                f"the Docker engine has no NVIDIA Container Toolkit for GPUs ({clip(reason, 30)})",
                "install it and run `nvidia-ctk runtime configure`, or drop --gpus",
            ) from exc
        if _MEMLOCK_REFUSED.search(reason):
            limit = "unlimited" if spec.memlock_bytes < 0 else f"{spec.memlock_bytes} bytes"
            raise WorkloadError(
                f"the Docker engine may not raise the locked-memory limit to {limit} "
                f"({clip(reason, 30)})",
                "give dockerd LimitMEMLOCK=infinity or pass a lower --memlock BYTES",
            ) from exc
        raise WorkloadError(
            f"container from {spec.image} did not start ({clip(reason, 60)})",
            "check the image's entrypoint and the engine's log",
        ) from exc


def run(spec: RunSpec, client: Any = None, out: TextIO | None = None,
        watch: Callable[[], AbstractContextManager[Any]] | None = None,
        err: TextIO | None = None) -> int:
    """Run ``spec`` to the end; returns the container's exit code (124 on time limit).

    The container's stdout goes to ``out`` and its stderr to ``err`` (by default
    this process's own), never mixed: ``workloads check --json`` through the
    runner must stay parseable JSON on stdout whatever the workload logs.

    ``watch`` (e.g. the GPU monitor) is entered once the container has started
    and left when it ends, so a container that fails to start leaves no trace.
    The container is removed in every case: normal exit, error, time limit,
    Ctrl-C (the KeyboardInterrupt is re-raised after the clean-up).
    """
    if client is None:
        from tfhost.engine import connect

        client = connect()
    container = create(client, spec)
    try:
        start(container, spec)
        with watch() if watch is not None else nullcontext():
            return follow(container, spec, out or sys.stdout, err or sys.stderr)
    finally:
        remove(container)


def follow(container: Any, spec: RunSpec, out: TextIO, err: TextIO) -> int:
    """Stream the started container's log until it exits; stop it at the time limit."""
    timed_out = threading.Event()
    timer: threading.Timer | None = None
    if spec.timeout_s:
        timer = threading.Timer(spec.timeout_s, _stop_on_timeout, (container, timed_out))
        timer.daemon = True
        timer.start()
    try:
        stream_logs(container, out, err)
        code = int(container.wait().get("StatusCode", 1))
    finally:
        if timer is not None:
            timer.cancel()
    if timed_out.is_set():
        print(
            f"workloads run: time limit of {spec.timeout_s:g} s reached; the container was "
            "stopped (records written so far are kept)",
            file=sys.stderr,
        )
        return TIMEOUT_EXIT_CODE
    return code


def stream_logs(container: Any, out: TextIO, err: TextIO) -> None:
    """Copy the container's stdout to ``out`` and its stderr to ``err`` as they arrive.

    One follower per stream, as ``docker run`` keeps them apart: a combined log
    interleaves a stderr note into the middle of a stdout document.
    """
    follower = threading.Thread(target=_copy_stream, args=(container, "stderr", err),
                                name="container-stderr", daemon=True)
    follower.start()
    _copy_stream(container, "stdout", out)
    follower.join()


def _copy_stream(container: Any, which: Literal["stdout", "stderr"], sink: TextIO) -> None:
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    chunks = container.logs(stream=True, follow=True, stdout=which == "stdout",
                            stderr=which == "stderr")
    for chunk in chunks:
        sink.write(decoder.decode(chunk))
        sink.flush()
    sink.write(decoder.decode(b"", final=True))
    sink.flush()


def remove(container: Any) -> None:
    """Remove ``container`` and its anonymous volumes (like ``docker run --rm``)."""
    import docker

    try:
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        return
    except docker.errors.APIError as exc:
        if "already in progress" not in _explanation(exc):
            raise


def _stop_on_timeout(container: Any, flag: threading.Event) -> None:
    import docker

    flag.set()
    with suppress(docker.errors.NotFound):
        container.stop(timeout=STOP_GRACE_S)


def _ensure_results_dir(path: Path) -> None:
    """Create the results directory as the calling user (not as root via the engine).

    A directory that is already there (itself, not a link to one) is only mounted: the
    container's user (``--user``) writes into it and may own it, as a user who made it for
    their run does. Whatever the host side writes there goes through safefs, which checks
    the directory again for that write. A missing one is made one component at a time.
    """
    try:
        there = stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        there = False
    try:
        if not there:
            safefs.ensure_directory(path)  # one component at a time, each checked
    except safefs.UnsafePath as exc:
        raise WorkloadError(
            f"cannot create the results directory {exc.path} ({exc.reason})",
            "choose a writable --results directory",
        ) from None
    except OSError as exc:
        raise WorkloadError(
            f"cannot create the results directory {path} ({exc.strerror or exc})",
            "choose a writable --results directory",
        ) from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise WorkloadError(
            f"the results directory {path} is not writable",
            "choose a writable --results directory",
        )


def _explanation(exc: Any) -> str:
    text = getattr(exc, "explanation", None) or str(exc)
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split())
