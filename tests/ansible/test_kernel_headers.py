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

On the same host, after the role converged, the kernel check (`site.yml --tags
nvidia_kernel_check`, tasks/kernel-check.yml): no kernel boots without its NVIDIA
module. The stand-in kernels are laid out as Debian's (`/boot/vmlinuz-<release>`,
`/lib/modules/<release>`, the headers' `/lib/modules/<release>/build` link, and the
headers' postinst running `/etc/kernel/header_postinst.d`); DKMS is Debian's real
`dkms`, building with the real gcc a one-file module registered as the driver's DKMS
package registers its source. A later kernel installed without its headers stops the
check (the fix off) naming it, or gets its headers and its module (the fix on), and a
second run changes nothing; a kernel whose headers the build fails against stops the
check naming it and quoting gcc's error from DKMS's make.log. Ubuntu and Rocky are not
covered here. Ubuntu's stand-in (Debian's real dkms under nvidia-dkms-<branch>) would take
the same stub kernels under Ubuntu's names (6.8.0-<abi>-generic, linux-headers-generic)
and three check runs on test_platforms.py's converged host; Rocky's dkms is a stub rpm
that builds nothing (tests/fixtures/rpmrepo/catalog.py), so it needs a building dkms,
kernel-core and kernel-devel-<release> rpms laying out /boot, /lib/modules and
/usr/src/kernels, and grubby's entries.
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
from tests.ansible.target import TargetHost
from tests.ansible.trust_lab import TrustLab, trust_lab
from tests.fixtures.aptrepo import build_repo
from tests.fixtures.aptrepo.debs import PackageFile, StubPackage
from tests.fixtures.aptrepo.signing import generate_key
from tests.support.background import AFTER_RUN_LAST, BackgroundJobs, JobContext, background_job
from tests.support.docker_engine import ensure_engine

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.timeout(900)]

SUFFIX = str(os.getpid())
NEWER = "6.1.0-99-amd64"  # an ABI no Debian mirror has yet: only the stand-in serves it
NEXT = "6.1.0-100-amd64"  # a later kernel, installed without its headers
BROKEN = "6.1.0-101-amd64"  # a kernel whose headers the DKMS build fails against
KERNELS = Path("debian-kernels")
REFUSAL = ("nvidia_driver : Refuse when the running kernel's headers are gone and no newer"
           " kernel waits")
KERNEL_CHECK_STOP = ("nvidia_driver : Stop before any reboot when a bootable kernel still lacks"
                     " its NVIDIA module")
STUB_VERSION = "6.1.999-1"
# What the driver's DKMS package registers on a real host (its postinst: `dkms add`): a module
# source DKMS builds per kernel, here one C file compiled by the real gcc against the kernel's
# headers (generated/autoconf.h, as every module build includes it), installed by the real dkms
# to /lib/modules/<release>/updates/dkms/nvidia.ko. The stub driver packages carry no source.
DKMS_SOURCE = "/usr/src/nvidia-580.126.16"
DKMS_CONF = """\
PACKAGE_NAME="nvidia"
PACKAGE_VERSION="580.126.16"
BUILT_MODULE_NAME[0]="nvidia"
DEST_MODULE_LOCATION[0]="/updates/dkms"
MAKE[0]="gcc -c -I${kernel_source_dir}/include -o nvidia.ko nv.c"
CLEAN="true"
AUTOINSTALL="yes"
"""
NV_C = "#include <generated/autoconf.h>\nint nv_stub_module = 1;\n"


def _kernel(release: str, headers_ok: bool = True) -> list[StubPackage]:
    """Debian's pair for one kernel ABI, laid out as Debian's are: the image (/boot/vmlinuz-*,
    /lib/modules/<release>) and the headers (/usr/src/linux-headers-<release>, and the
    /lib/modules/<release>/build link DKMS builds through), whose postinst runs the
    /etc/kernel/header_postinst.d hooks with the release (DKMS's builds the module there)."""
    src = f"/usr/src/linux-headers-{release}"
    headers = {f"{src}/Makefile": PackageFile("# stub\n"),
               f"/lib/modules/{release}/build": PackageFile("", link_to=src)}
    if headers_ok:
        headers[f"{src}/include/generated/autoconf.h"] = PackageFile("#define CONFIG_X86_64 1\n")
    else:  # a headers package whose build fails: its generated headers are missing
        headers[f"{src}/include/linux/README.stub"] = PackageFile("no generated headers\n")
    return [
        StubPackage(f"linux-image-{release}", STUB_VERSION, f"Linux {release} for 64-bit PCs",
                    section="kernel", source="linux-signed-amd64",
                    files={f"/boot/vmlinuz-{release}": PackageFile("stub kernel image\n"),
                           f"/boot/config-{release}": PackageFile("# stub kernel config\n"),
                           f"/lib/modules/{release}/modules.builtin": PackageFile("")}),
        StubPackage(f"linux-headers-{release}", STUB_VERSION, f"Header files for Linux {release}",
                    section="kernel", source="linux", files=headers,
                    postinst=("if [ -d /etc/kernel/header_postinst.d ]; then run-parts --report"
                              f" --exit-on-error --arg={release} /etc/kernel/header_postinst.d;"
                              " fi")),
    ]


def _kernel_packages() -> list[StubPackage]:
    """The kernels the stand-in serves; and the architecture's headers meta-package, which
    depends on NEWER's headers (a later kernel installed on its own does not bring its own)."""
    return [
        StubPackage("linux-headers-amd64", STUB_VERSION, "Header files for Linux amd64"
                    " configuration (meta-package)", section="kernel", source="linux-signed-amd64",
                    depends=(f"linux-headers-{NEWER} (= {STUB_VERSION})",),
                    files={"/usr/share/doc/linux-headers-amd64/README.stub": PackageFile("m\n")}),
        *_kernel(NEWER), *_kernel(NEXT), *_kernel(BROKEN, headers_ok=False),
    ]


@contextmanager
def _lab(workdir: Path) -> Iterator[TrustLab]:
    """The trust lab's repositories and mirror, with the kernel stand-in beside them."""
    with trust_lab(workdir) as built:
        with tempfile.TemporaryDirectory(prefix="kernels-gpg-") as keys:
            key = generate_key(Path(keys), "kernel stand-in <kernels@example.invalid>")
            try:
                build_repo(built.repos.root / KERNELS, _kernel_packages(), key,
                           "Debian", "Debian")
                (built.repos.root / KERNELS / "key.asc").write_text(key.public_armored)
            finally:
                key.close()
        yield built


@dataclass(frozen=True)
class HeadersRuns:
    """The running kernel's release, and each run with what the host had after it."""

    running: str
    gone: PlaybookRun
    gone_headers: str
    newest: PlaybookRun
    newest_headers: str
    no_fix: PlaybookRun
    no_fix_modules: str
    fixed: PlaybookRun
    fixed_headers: str
    fixed_modules: str
    again: PlaybookRun
    broken: PlaybookRun


def _packages(host: TargetHost, pattern: str) -> str:
    return host.exec("dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\\n", pattern,
                     check=False).stdout


def _modules(host: TargetHost) -> str:
    """The NVIDIA modules DKMS installed, one path a line."""
    return host.exec("sh", "-c", "ls /lib/modules/*/updates/dkms/nvidia.ko 2>/dev/null",
                     check=False).stdout


def _register_dkms_module(host: TargetHost) -> None:
    """Debian's real dkms, and the module source the driver's DKMS package registers with it."""
    host.exec("apt-get", "install", "-qq", "-y", "dkms")
    host.exec("mkdir", "-p", DKMS_SOURCE)
    host.exec("tee", f"{DKMS_SOURCE}/dkms.conf", stdin=DKMS_CONF)
    host.exec("tee", f"{DKMS_SOURCE}/nv.c", stdin=NV_C)
    host.exec("dkms", "add", "-m", "nvidia", "-v", "580.126.16")


@background_job(__file__, name="kernel-headers", run_last=AFTER_RUN_LAST)
def _headers_runs(job: JobContext) -> HeadersRuns:
    """Every run on one host of its own: a background job queued behind the converges, this
    module's tests after theirs (tests/support/background.py, AFTER_RUN_LAST)."""
    ensure_engine()
    with _lab(job.workdir) as lab:
        host, inventory = lab.start(f"tfhost-headers-{SUFFIX}")
        job.on_cancel(host.remove)
        defaults: dict[str, object] = {"nvidia_driver_kernel_headers_packages": []}
        check = ("--tags", "nvidia_kernel_check")
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
            _register_dkms_module(host)
            newest = lab.run(inventory, "headers-newest", defaults, "--tags", "nvidia_driver")
            newest_headers = _packages(host, "linux-headers-*")

            # A later kernel installed on its own, without its headers (no meta-package brings
            # them); and NEWER's module no longer built, its headers in place (`dkms unbuild`:
            # only the role's own `dkms autoinstall -k` brings it back). The check stops
            # naming both, or (the fix on) installs the headers and builds.
            host.exec("apt-get", "install", "-qq", "-y", f"linux-image-{NEXT}")
            host.exec("dkms", "unbuild", "-m", "nvidia", "-v", "580.126.16", "-k", NEWER)
            no_fix = lab.run(inventory, "check-no-fix",
                             {**defaults, "nvidia_driver_kernel_check_fix": False}, *check)
            no_fix_modules = _modules(host)
            fixed = lab.run(inventory, "check-fix", defaults, *check)
            fixed_headers = _packages(host, "linux-headers-*")
            fixed_modules = _modules(host)
            again = lab.run(inventory, "check-again", defaults, *check)

            # A kernel whose DKMS build fails (an unattended upgrade's: the headers' own hook
            # fails, apt reports it and carries on).
            host.exec("apt-get", "install", "-qq", "-y", f"linux-image-{BROKEN}",
                      f"linux-headers-{BROKEN}", check=False)
            broken = lab.run(inventory, "check-broken", defaults, *check)
        finally:
            host.remove()
    return HeadersRuns(running, gone, gone_headers, newest, newest_headers, no_fix,
                       no_fix_modules, fixed, fixed_headers, fixed_modules, again, broken)


@pytest.fixture(scope="module")
def runs(background_jobs: BackgroundJobs) -> HeadersRuns:
    with background_jobs.held("kernel-headers") as value:
        return value


def _flat(run: PlaybookRun) -> str:
    return " ".join(run.output.split())


def test_headers_for_the_newest_installed_kernel_or_one_line_with_the_fix(
        runs: HeadersRuns) -> None:
    running, gone, gone_headers = runs.running, runs.gone, runs.gone_headers
    newest, newest_headers = runs.newest, runs.newest_headers
    flat = _flat(gone)
    assert gone.returncode != 0
    assert gone.failed_task == REFUSAL, gone.explain()
    assert f"linux-headers-{running} (the running kernel's headers" in flat
    assert "Fix: `apt-get update && apt-get full-upgrade`" in flat
    assert gone_headers.strip() == "", "nothing is installed before the refusal"

    assert newest.returncode == 0, newest.explain()
    assert f"linux-headers-{NEWER} installed" in newest_headers.splitlines()
    # Debian's headers meta-package too: the next kernel update brings its headers.
    assert "linux-headers-amd64 installed" in newest_headers.splitlines(), newest_headers
    assert f"the module is built for the newest installed kernel {NEWER}" in _flat(newest)


def test_converged_host_passes_the_kernel_check(runs: HeadersRuns) -> None:
    """The converge's own check, before the reboot it would trigger: the kernel that boots next
    has its module (DKMS built it when the role installed its headers)."""
    assert (f"Every bootable kernel of tfhost-headers-{SUFFIX} has its NVIDIA module ({NEWER};"
            " Secure Boot off)") in _flat(runs.newest), runs.newest.explain()


def test_a_kernel_without_headers_stops_the_check_without_the_fix(runs: HeadersRuns) -> None:
    no_fix = runs.no_fix
    flat = _flat(no_fix)
    assert no_fix.returncode != 0
    assert no_fix.failed_task == KERNEL_CHECK_STOP, no_fix.explain()
    assert f"would boot a kernel without its NVIDIA module: {NEWER}: " in flat, no_fix.explain()
    assert f"; {NEXT}: no headers for {NEXT}" in flat, no_fix.explain()
    assert (f"{NEWER}: the NVIDIA module is not built for {NEWER} although its headers are"
            " installed") in flat, no_fix.explain()
    # Headers named only for the kernel without them: NEWER has its own.
    assert f"Fix: install linux-headers-{NEXT} and run `dkms autoinstall -k <kernel>`" in flat
    assert "Nothing was rebooted" in flat
    assert runs.no_fix_modules.strip() == "", "the check alone installs and builds nothing"


def test_the_fix_installs_the_headers_and_builds_the_module_then_nothing_changes(
        runs: HeadersRuns) -> None:
    fixed, again = runs.fixed, runs.again
    assert fixed.returncode == 0, fixed.explain()
    assert fixed.recap["changed"] > 0
    assert f"linux-headers-{NEXT} installed" in runs.fixed_headers.splitlines(), runs.fixed_headers
    assert f"/lib/modules/{NEXT}/updates/dkms/nvidia.ko" in runs.fixed_modules.splitlines()
    assert f"/lib/modules/{NEWER}/updates/dkms/nvidia.ko" in runs.fixed_modules.splitlines()
    # The healthy host: every installed kernel passes, and a second run changes nothing.
    assert again.returncode == 0, again.explain()
    assert again.recap["changed"] == 0, again.explain()
    assert (f"Every bootable kernel of tfhost-headers-{SUFFIX} has its NVIDIA module"
            f" ({NEWER}, {NEXT}; Secure Boot off)") in _flat(again), again.explain()


def test_a_failed_dkms_build_stops_the_check_naming_kernel_and_cause(runs: HeadersRuns) -> None:
    broken = runs.broken
    flat = _flat(broken)
    assert broken.returncode != 0
    assert broken.failed_task == KERNEL_CHECK_STOP, broken.explain()
    assert (f"would boot a kernel without its NVIDIA module: {BROKEN}: the DKMS build of the"
            f" NVIDIA module failed for {BROKEN}") in flat, broken.explain()
    # The cause, from DKMS's build log: gcc's own words.
    assert "fatal error: generated/autoconf.h: No such file or directory" in flat
    # Its headers are installed: the fix does not send the reader to install them.
    assert "Fix: run `dkms autoinstall -k <kernel>`" in flat, broken.explain()
    assert f"install linux-headers-{BROKEN}" not in flat
    assert ("(a failed build's log is in /var/lib/dkms/, its cause above), or remove the kernel"
            in flat)
    assert f"{NEXT}: " not in flat.split("would boot a kernel without", 1)[1]
    assert "Nothing was rebooted" in flat
