"""The hypervisor tests boot the same box as tests/vm for the real (non-check) run."""

from tests.vm.box_fixture import box

__all__ = ["box"]
