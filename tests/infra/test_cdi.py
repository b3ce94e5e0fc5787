"""CDI: a spec offering every GPU where nvidia-smi lists GPUs, none elsewhere."""

from __future__ import annotations

from typing import Any

import pytest


def _gpus(host: Any) -> int:
    result = host.run("nvidia-smi -L")
    return len([line for line in result.stdout.splitlines() if line.startswith("GPU ")])


def test_cdi_spec_where_there_are_gpus(host: Any, tfvars: dict[str, Any]) -> None:
    mode = tfvars.get("nvidia_container_toolkit_cdi", "auto")
    spec = host.file(tfvars.get("nvidia_container_toolkit_cdi_spec", "/etc/cdi/nvidia.yaml"))
    if mode == "never" or not host.exists("nvidia-ctk"):
        pytest.skip("no CDI spec is generated here (nvidia_container_toolkit not run, or never)")
    if mode == "always" or _gpus(host) > 0:
        assert spec.exists, "no CDI spec although the host has GPUs"
        assert "nvidia.com/gpu=all" in host.check_output("nvidia-ctk cdi list")
    else:
        assert not spec.exists, "a CDI spec on a host without GPUs"
