"""Whether this machine runs the test guests with hardware virtualization, and if not, whether to.

A guest under KVM provisions in minutes. Under TCG (software emulation: CI's
/dev/kvm is a nested PVM that cannot boot a stock kernel) the same guests cost
more than the rest of the suite can spare on two cores: on an AVX2-only EPYC
host (2026-11-28) `vagrant up` alone held one core for over 50 minutes, the
hypervisor VM another 13 core-minutes, and the suite did not finish in CI's 90.
So an emulated guest runs only when asked for with TFHOST_TEST_EMULATED_GUESTS=1
(docs/development.md gives each guest's time); with KVM it always runs.

The rule is a plain boolean at import time, so a module's `skipif` also keeps its
background job (tests/support/background.py) from starting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

OPT_IN = "TFHOST_TEST_EMULATED_GUESTS"


def domain_type() -> str:
    """``kvm`` with hardware virtualization, else ``qemu`` (TCG): ``vm.sh --accel auto``'s rule."""
    hardware = Path("/sys/module/kvm_intel").exists() or Path("/sys/module/kvm_amd").exists()
    return "kvm" if hardware and os.access("/dev/kvm", os.R_OK | os.W_OK) else "qemu"


def emulated_guests_skipped(environ: Mapping[str, str] = os.environ) -> bool:
    """True where a guest would run under TCG and nobody asked for it (in `environ`)."""
    return domain_type() == "qemu" and environ.get(OPT_IN) != "1"


SKIP_REASON = (f"no hardware virtualization: an emulated guest costs most of an hour of a core; "
               f"set {OPT_IN}=1 to run it")
