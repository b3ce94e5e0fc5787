"""Fixtures for the VM tests: the box, built once per machine and cached by recipe."""

from tests.vm.box_fixture import box

__all__ = ["box"]
