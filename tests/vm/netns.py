"""libvirt in a network namespace of its own, for `vagrant up` in CI.

Why: vagrant-libvirt puts its guests on libvirt's management bridge
(192.168.121.0/24). The project's tests may only send traffic to loopback or to
addresses inside a namespace the test itself creates. So the test makes one:

* `unshare --net --mount --pid --fork --mount-proc`: its own network stack
  (only `lo`, brought up here; libvirt adds its bridge, dnsmasq and iptables
  rules inside it), its own mounts and its own PID 1. Killing that PID 1 kills
  libvirtd, dnsmasq and QEMU with it, so teardown cannot leave a daemon behind
  even when a step failed half-way.
* libvirt's state folders (/etc/libvirt, /run/libvirt, /var/lib/libvirt, ...)
  are bind mounts of folders under the test's work folder, visible only in
  that mount namespace: the machine's own libvirt (if any) is never touched.
* sysfs is mounted again inside, so libvirt sees the namespace's interfaces.

Services on the host's loopback (the apt proxy, stub repositories, the fake
registry) are relayed onto the namespace's own 127.0.0.1 by `relay_ports`:
the listening socket is made inside the namespace and each connection is
opened on the host's loopback, so no packet leaves either loopback.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CLONE_NEWNET = 0x40000000
# PID 1 of the namespace adopts every daemonized process (libvirt's QEMU probes,
# dnsmasq) and must reap them: an unreaped zombie looks alive to libvirt, which
# then waits 40 s per probe for it to die.
REAPER = """
import os, time
while True:
    try:
        os.wait()
    except ChildProcessError:
        time.sleep(0.5)
"""
# libvirt's folders, and the names of their private copies under the work folder.
LIBVIRT_DIRS = {"etc": "/etc/libvirt", "run": "/run/libvirt", "lib": "/var/lib/libvirt",
                "log": "/var/log/libvirt", "cache": "/var/cache/libvirt"}
# QEMU as root without the isolation a real host has and a CI container lacks:
# no cgroups, no security driver, no private /dev, stdio to files (no virtlogd).
QEMU_CONF = """
# Appended by tests/vm/netns.py: libvirt inside a test's own namespaces.
user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
cgroup_controllers = [ ]
namespaces = [ ]
stdio_handler = "file"
"""
SETUP = """
set -eu
ip link set lo up
mount -t sysfs sysfs /sys
for pair in {binds}; do
  mkdir -p "${{pair#*=}}"
  mount --bind "${{pair%%=*}}" "${{pair#*=}}"
done
{hide_kvm}
libvirtd --daemon --pid-file /run/libvirt/tfhost-libvirtd.pid
"""
# A /dev/kvm that cannot run the guest (CI's nested PVM) also hangs libvirt's
# probe of QEMU's KVM capabilities: without it, libvirt offers TCG only.
HIDE_KVM = "[ ! -e /dev/kvm ] || mount --bind /dev/null /dev/kvm"


@dataclass
class Namespace:
    """A running namespace: its PID 1 (as the host sees it) and its work folder."""

    pid: int
    root: Path

    def command(self, args: Sequence[str], cwd: Path | None = None) -> list[str]:
        """`args` run inside the namespace (network, mounts and PIDs)."""
        wd = [f"--wd={cwd}"] if cwd is not None else []
        return ["nsenter", "-t", str(self.pid), "--net", "--mount", "--pid", *wd, *args]

    def run(self, args: Sequence[str], cwd: Path | None = None,
            env: Mapping[str, str] | None = None, timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(self.command(args, cwd), capture_output=True, text=True,
                                env=dict(env) if env is not None else None, timeout=timeout,
                                check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} in the namespace failed "
                                 f"(rc {result.returncode}):\n{result.stdout[-3000:]}\n"
                                 f"{result.stderr[-3000:]}")
        return result


@contextmanager
def libvirt_namespace(root: Path, hide_kvm: bool,
                      ready_timeout: float = 180) -> Iterator[Namespace]:
    """Start libvirtd in fresh namespaces; on the way out destroy every domain and kill all.

    hide_kvm: the guests run under TCG (domain type qemu); /dev/kvm is hidden from libvirt.
    """
    for name, source in LIBVIRT_DIRS.items():
        (root / name).mkdir(parents=True, exist_ok=True)
        if name == "etc":
            shutil.copytree(source, root / name, dirs_exist_ok=True, symlinks=True)
    # Only vagrant-libvirt's own network runs here; libvirt's default one is not needed.
    shutil.rmtree(root / "etc" / "qemu" / "networks", ignore_errors=True)
    with (root / "etc" / "qemu.conf").open("a") as conf:
        conf.write(QEMU_CONF)
    holder = subprocess.Popen(
        ["unshare", "--net", "--mount", "--pid", "--fork", "--mount-proc",
         "--propagation", "private", sys.executable, "-c", REAPER],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    namespace: Namespace | None = None
    try:
        namespace = Namespace(_child_of(holder.pid), root)
        binds = " ".join(f"{root / name}={target}" for name, target in LIBVIRT_DIRS.items())
        setup = SETUP.format(binds=binds, hide_kvm=HIDE_KVM if hide_kvm else "")
        namespace.run(["sh", "-c", setup])
        deadline = time.monotonic() + ready_timeout
        while namespace.run(["virsh", "-c", "qemu:///system", "version"],
                            check=False, timeout=ready_timeout).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError("libvirtd did not answer in the namespace; see "
                                   f"{root / 'log'}")
            time.sleep(1)
        yield namespace
    finally:
        if namespace is not None:
            try:
                destroy_domains(namespace)
            finally:
                # PID 1 of the namespace: the kernel kills everything else in it,
                # also when libvirtd no longer answered above.
                with contextlib.suppress(ProcessLookupError):
                    os.kill(namespace.pid, signal.SIGKILL)
        holder.kill()
        holder.wait(timeout=60)
        # The guest's disk and the uploaded box are a few GB.
        shutil.rmtree(root / "lib" / "images", ignore_errors=True)


def _child_of(pid: int, timeout: float = 10) -> int:
    """The forked PID 1 of `unshare --fork` (the namespaces are entered through it)."""
    deadline = time.monotonic() + timeout
    children = Path(f"/proc/{pid}/task/{pid}/children")
    while time.monotonic() < deadline:
        found = children.read_text().split() if children.exists() else []
        if found:
            return int(found[0])
        time.sleep(0.1)
    raise RuntimeError(f"unshare (pid {pid}) started no child")


def destroy_domains(namespace: Namespace) -> None:
    """Power off and undefine what a failed test left, before the daemons go."""
    try:
        listed = namespace.run(["virsh", "-c", "qemu:///system", "list", "--all", "--name"],
                               check=False, timeout=60)
        for domain in listed.stdout.split():
            namespace.run(["virsh", "-c", "qemu:///system", "destroy", domain], check=False)
            namespace.run(["virsh", "-c", "qemu:///system", "undefine", "--nvram", domain],
                          check=False)
    except subprocess.TimeoutExpired:
        pass  # a hung libvirtd: killing the namespace's PID 1 ends it and its guests


def _listen_in(namespace_pid: int, port: int) -> socket.socket:
    """A listening socket on 127.0.0.1:port inside the namespace.

    setns() moves only the calling thread, and a socket stays in the namespace it
    was made in: this runs in a thread of its own that goes back afterwards.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    made: list[socket.socket] = []
    failure: list[BaseException] = []

    def inside() -> None:
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/proc/{namespace_pid}/ns/net", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns into the test namespace")
            try:
                sock = socket.socket()
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("127.0.0.1", port))
                sock.listen(16)
                made.append(sock)
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back to the host namespace")
        except BaseException as error:  # reported to the caller below
            failure.append(error)
        finally:
            os.close(own)
            os.close(target)

    thread = threading.Thread(target=inside, name=f"netns-listen-{port}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return made[0]


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


def _serve(listener: socket.socket, port: int) -> None:
    while True:
        try:
            inner, _ = listener.accept()
        except OSError:
            return  # the listener was closed: the relay is over
        try:
            outer = socket.create_connection(("127.0.0.1", port), timeout=30)
        except OSError:
            inner.close()
            continue
        outer.settimeout(None)
        for source, sink in ((inner, outer), (outer, inner)):
            threading.Thread(target=_pipe, args=(source, sink), daemon=True).start()


@contextmanager
def relay_ports(namespace: Namespace, ports: Sequence[int]) -> Iterator[None]:
    """Make the host's 127.0.0.1:PORT answer on the namespace's 127.0.0.1:PORT too."""
    listeners = [_listen_in(namespace.pid, port) for port in ports]
    for listener, port in zip(listeners, ports, strict=True):
        threading.Thread(target=_serve, args=(listener, port), daemon=True,
                         name=f"netns-relay-{port}").start()
    try:
        yield
    finally:
        for listener in listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
