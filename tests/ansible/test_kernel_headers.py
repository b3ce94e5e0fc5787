"""Kernel headers on the Debian family: the running kernel's, and the newest installed kernel's.

The nvidia_driver role, with `nvidia_driver_kernel_headers_packages` empty (its
default), on a fresh Debian 12 host. The host runs the CI machine's kernel, whose
headers no Debian mirror has: exactly the state of a server whose mirror moved
on to a newer kernel ABI. A stand-in for the distribution's kernel packages (a
signed apt repository of stub `linux-image-<release>` and `linux-headers-<release>`
packages, on 127.0.0.1) supplies the newer kernel the last upgrade would have
installed.

Before the fix the role asked apt for `linux-headers-$(uname -r)` and nothing
else: apt's "unable to locate package" ended the play, and a kernel installed by
an upgrade (the one that boots next) got no module. It also installs Debian's
headers meta-package of the kernel flavour (here, without a kernel meta-package
in the container, the architecture's: `linux-headers-amd64`, which the stand-in
repository carries as Debian's does, depending on the newest ABI's headers), so
that the next kernel update brings its headers too; before, only versioned
headers were installed and a later kernel had none.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.ansible.playbook import PlaybookRun
from tests.ansible.trust_lab import TrustLab, trust_lab
from tests.fixtures.aptrepo import build_repo
from tests.fixtures.aptrepo.debs import PackageFile, StubPackage
from tests.fixtures.aptrepo.signing import generate_key
from tests.support.background import AFTER_RUN_LAST, BackgroundJobs, JobContext, background_job
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(900)]

SUFFIX = str(os.getpid())
NEWER = "6.1.0-99-amd64"  # an ABI no Debian mirror has yet: only the stand-in serves it
KERNELS = Path("debian-kernels")
REFUSAL = ("nvidia_driver : Refuse when the running kernel's headers are gone and no newer"
           " kernel waits")


def _kernel_packages(release: str) -> list[StubPackage]:
    """Debian's pair for one kernel ABI: the image and the headers DKMS builds against; and the
    architecture's headers meta-package, which depends on that ABI's headers."""
    return [
        StubPackage("linux-headers-amd64", "6.1.999-1", "Header files for Linux amd64 configuration"
                    " (meta-package)", section="kernel", source="linux-signed-amd64",
                    depends=(f"linux-headers-{release} (= 6.1.999-1)",),
                    files={"/usr/share/doc/linux-headers-amd64/README.stub": PackageFile("m\n")}),
        StubPackage(f"linux-image-{release}", "6.1.999-1", f"Linux {release} for 64-bit PCs",
                    section="kernel", source="linux-signed-amd64",
                    files={f"/boot/config-{release}": PackageFile("# stub kernel config\n")}),
        StubPackage(f"linux-headers-{release}", "6.1.999-1", f"Header files for Linux {release}",
                    section="kernel", source="linux",
                    files={f"/usr/src/linux-headers-{release}/Makefile": PackageFile("# stub\n")}),
    ]


@contextmanager
def _lab(workdir: Path) -> Iterator[TrustLab]:
    """The trust lab's repositories and mirror, with the kernel stand-in beside them."""
    with trust_lab(workdir) as built:
        with tempfile.TemporaryDirectory(prefix="kernels-gpg-") as keys:
            key = generate_key(Path(keys), "kernel stand-in <kernels@example.invalid>")
            try:
                build_repo(built.repos.root / KERNELS, _kernel_packages(NEWER), key,
                           "Debian", "Debian")
                (built.repos.root / KERNELS / "key.asc").write_text(key.public_armored)
            finally:
                key.close()
        yield built


@dataclass(frozen=True)
class HeadersRuns:
    """The running kernel's release, and each run with the headers dpkg had after it."""

    running: str
    gone: PlaybookRun
    gone_headers: str
    newest: PlaybookRun
    newest_headers: str


@background_job(__file__, name="kernel-headers", run_last=AFTER_RUN_LAST)
def _headers_runs(job: JobContext) -> HeadersRuns:
    """Both runs on one host of its own: a background job queued behind the converges, this
    module's test after theirs (tests/support/background.py, AFTER_RUN_LAST)."""
    ensure_engine()
    with _lab(job.workdir) as lab:
        host, inventory = lab.start(f"tfhost-headers-{SUFFIX}")
        job.on_cancel(host.remove)
        defaults: dict[str, object] = {"nvidia_driver_kernel_headers_packages": []}
        # The second run stops at the CUDA repository's index (served by the switched-off
        # mirror), right after the headers: the driver install is not what this test is about.
        stop_after_headers = {
            **defaults,
            "nvidia_driver_cuda_repo_base_url": f"{lab.flaky_url}/compute/cuda/repos",
            "nvidia_driver_cuda_repo_key_url": (
                f"{lab.base_url}/compute/cuda/repos/debian12/x86_64/3bf863cc.pub"),
        }
        try:
            running = host.exec("uname", "-r").stdout.strip()
            host.exec("apt-get", "update", "-qq")
            if host.exec("apt-cache", "show", f"linux-headers-{running}",
                         check=False).returncode == 0:
                pytest.skip(f"this machine runs {running}, whose headers Debian's mirror still has")
            key = (lab.repos.root / KERNELS / "key.asc").read_text()
            host.exec("sh", "-c", "mkdir -p /etc/apt/keyrings"
                      " && cat >/etc/apt/keyrings/debian-kernels.asc", stdin=key)
            host.exec("sh", "-c", "echo 'deb [signed-by=/etc/apt/keyrings/debian-kernels.asc] "
                                  f"{lab.base_url}/{KERNELS}/ /'"
                                  " >/etc/apt/sources.list.d/kernels.list")
            host.exec("apt-get", "update", "-qq")

            gone = lab.run(inventory, "headers-gone", defaults, "--tags", "nvidia_driver")
            gone_headers = host.exec("dpkg-query", "-W", "linux-headers-*", check=False).stdout

            # What `apt-get full-upgrade` does on a real host: the newer kernel, not yet booted.
            host.exec("apt-get", "install", "-qq", "-y", f"linux-image-{NEWER}")
            newest = lab.run(inventory, "headers-newest", stop_after_headers,
                             "--tags", "nvidia_driver")
            newest_headers = host.exec("dpkg-query", "-W", "-f",
                                       "${Package} ${db:Status-Status}\\n",
                                       "linux-headers-*", check=False).stdout
        finally:
            host.remove()
    return HeadersRuns(running, gone, gone_headers, newest, newest_headers)


@pytest.fixture(scope="module")
def runs(background_jobs: BackgroundJobs) -> HeadersRuns:
    with background_jobs.held("kernel-headers") as value:
        return value


def test_headers_for_the_newest_installed_kernel_or_one_line_with_the_fix(
        runs: HeadersRuns) -> None:
    running, gone, gone_headers = runs.running, runs.gone, runs.gone_headers
    newest, newest_headers = runs.newest, runs.newest_headers
    flat = " ".join(gone.output.split())
    assert gone.returncode != 0
    assert gone.failed_task == REFUSAL, gone.explain()
    assert f"linux-headers-{running} (the running kernel's headers" in flat
    assert "Fix: `apt-get update && apt-get full-upgrade`" in flat
    assert gone_headers.strip() == "", "nothing is installed before the refusal"

    assert newest.failed_task != REFUSAL, newest.explain()
    assert "index" in newest.failed_task, newest.explain()  # past the headers, as arranged
    assert f"linux-headers-{NEWER} installed" in newest_headers.splitlines()
    # Debian's headers meta-package too: the next kernel update brings its headers.
    assert "linux-headers-amd64 installed" in newest_headers.splitlines(), newest_headers
    assert (f"the module is built for the newest installed kernel {NEWER}"
            in " ".join(newest.output.split()))
