"""The reference table (``reference.yaml``): datasheet limits per GPU model, and the thresholds.

Kept as data so a new GPU, a corrected figure or a different threshold is one
line to review, each with the document it came from. This module only loads and
looks up; what a figure means for a verdict is :mod:`workloads.accept.verdicts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

MATMUL_DTYPES = ("float32", "tensorfloat32", "bfloat16", "float16")


@dataclass(frozen=True)
class Figure:
    """One published number and the document it was taken from."""

    value: float
    source: str  # a key of Reference.documents

    def cite(self, documents: dict[str, dict[str, str]]) -> str:
        doc = documents.get(self.source, {})
        return f"{doc.get('title', self.source)} ({doc.get('date', 'undated')})"


@dataclass(frozen=True)
class NvLinkSpec:
    """The NVLink a model has on its board (``optional``: a bridge that may be absent).

    ``generation`` is NVIDIA's NVLink generation (A100: 3, H100: 4, B200: 5), the major
    of the version NVML reports as ``nvmlNvlinkVersion_t`` (A100: ``NVML_NVLINK_VERSION_3_1``).
    """

    generation: int
    links: int
    optional: bool
    source: str


@dataclass(frozen=True)
class GpuModel:
    """Datasheet limits of one GPU model (matched by PCI device ID)."""

    model: str
    pci_device_ids: tuple[int, ...]
    compute_capability: str
    matmul_tflops: dict[str, Figure]
    memory_gbps: Figure | None  # None: NVIDIA publishes no bandwidth for this variant
    nvlink: NvLinkSpec | None = None
    identified_by: str | None = None  # the document that says what this device is


@dataclass(frozen=True)
class Threshold:
    """``warn`` below ``warn_below`` × limit, ``fail`` below ``fail_below`` × limit.

    ``documents`` are the keys of the documents ``basis`` was chosen from.
    """

    warn_below: float
    fail_below: float
    basis: str
    documents: tuple[str, ...] = ()


@dataclass(frozen=True)
class Reference:
    documents: dict[str, dict[str, str]]
    gpus: tuple[GpuModel, ...]
    thresholds: dict[str, Threshold]
    pcie_lane_gbps: dict[int, float]
    pcie_source: str
    nvlink_link_gbps: dict[int, float]  # per link and direction, by NVLink generation
    nvlink_source: str
    busy_share: float = 0.10
    by_device_id: dict[int, GpuModel] = field(default_factory=dict)

    def model_for(self, pci_device_id: int | None) -> GpuModel | None:
        """The model whose PCI device ID this is, or None (an unknown GPU)."""
        if pci_device_id is None:
            return None
        return self.by_device_id.get(pci_device_id)

    def pcie_gbps(self, generation: int | None, width: int | None) -> float | None:
        """Per-direction bandwidth of a link of ``generation`` × ``width`` lanes, in GB/s."""
        if not generation or not width or generation not in self.pcie_lane_gbps:
            return None
        return self.pcie_lane_gbps[generation] * width

    def nvlink_gbps(self, generation: int | None, links: int | None) -> float | None:
        """Per-direction GB/s of ``links`` NVLinks of ``generation``; None if either is unknown."""
        if not generation or not links or generation not in self.nvlink_link_gbps:
            return None
        return self.nvlink_link_gbps[generation] * links

    def cite(self, source: str) -> str:
        """The document's title and date."""
        return Figure(0.0, source).cite(self.documents)

    def ref(self, source: str) -> str:
        """A short reference for a table row, ``[key, date]``; the record lists the documents."""
        return f"[{source}, {self.documents.get(source, {}).get('date', 'undated')}]"


def _figure(raw: Any, where: str) -> Figure:
    if not isinstance(raw, dict) or "value" not in raw or "source" not in raw:
        raise ValueError(f"{where}: a figure needs a value and a source, got {raw!r}")
    return Figure(float(raw["value"]), str(raw["source"]))


def parse(data: dict[str, Any]) -> Reference:
    """Build a :class:`Reference` from the YAML document, checking every figure has a source."""
    documents = {
        str(k): {str(a): str(b) for a, b in v.items()} for k, v in data["documents"].items()
    }
    gpus = []
    for raw in data["gpus"]:
        name = raw["model"]
        nvlink = raw.get("nvlink")
        gpus.append(
            GpuModel(
                model=name,
                pci_device_ids=tuple(int(i) for i in raw["pci_device_ids"]),
                compute_capability=str(raw["compute_capability"]),
                matmul_tflops={
                    dtype: _figure(fig, f"{name} matmul {dtype}")
                    for dtype, fig in (raw["matmul_tflops"] or {}).items()
                },
                memory_gbps=None
                if raw["memory_gbps"] is None
                else _figure(raw["memory_gbps"], f"{name} memory"),
                nvlink=None
                if nvlink is None
                else NvLinkSpec(
                    int(nvlink["generation"]),
                    int(nvlink["links"]),
                    bool(nvlink.get("optional", False)),
                    str(nvlink["source"]),
                ),
                identified_by=None if raw.get("identified_by") is None
                else str(raw["identified_by"]),
            )
        )
    thresholds = {
        name: Threshold(
            float(t["warn_below"]),
            float(t["fail_below"]),
            " ".join(t["basis"].split()),
            tuple(str(d) for d in t.get("documents") or ()),
        )
        for name, t in data["thresholds"].items()
        if "warn_below" in t
    }
    for name, t in data["thresholds"].items():
        cited = t.get("documents") or []
        if not cited or any(str(d) not in documents for d in cited):
            raise ValueError(f"threshold {name}: `documents` must name entries of `documents`")
    reference = Reference(
        documents=documents,
        gpus=tuple(gpus),
        thresholds=thresholds,
        pcie_lane_gbps={
            int(k): float(v) for k, v in data["pcie_lane_gbps"]["per_generation"].items()
        },
        pcie_source=str(data["pcie_lane_gbps"]["source"]),
        nvlink_link_gbps={
            int(k): float(v) for k, v in data["nvlink_link_gbps"]["per_generation"].items()
        },
        nvlink_source=str(data["nvlink_link_gbps"]["source"]),
        busy_share=float(data["thresholds"]["busy_share"]["warn_above"]),
    )
    for gpu in gpus:
        if gpu.identified_by is not None and gpu.identified_by not in documents:
            raise ValueError(f"{gpu.model}: identified_by must name an entry of `documents`")
        for device_id in gpu.pci_device_ids:
            if device_id in reference.by_device_id:
                raise ValueError(f"PCI device ID {device_id:#06x} appears twice")
            reference.by_device_id[device_id] = gpu
    return reference


@cache
def load() -> Reference:
    """The packaged table (``workloads/hardware/reference.yaml``)."""
    text = resources.files("workloads.hardware").joinpath("reference.yaml").read_text()
    return parse(yaml.safe_load(text))
