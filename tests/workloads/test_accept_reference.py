"""The reference table: a source on every figure, the GPUs asked for, IDs as the driver role has."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.workloads.conftest import REPO
from workloads.hardware import identify
from workloads.hardware.reference import MATMUL_DTYPES, load, parse

TABLE = REPO / "workloads" / "hardware" / "reference.yaml"
GENERATIONS = REPO / "ansible" / "roles" / "nvidia_driver" / "vars" / "gpu_generations.yml"


def raw() -> dict:
    return yaml.safe_load(TABLE.read_text())


def test_every_figure_names_a_document_with_a_date() -> None:
    data = raw()
    documents = data["documents"]
    for key, doc in documents.items():
        assert doc.get("title") and doc.get("where") and doc.get("date"), key
        assert re.fullmatch(r"\d{4}-\d{2}", doc["date"]), key
        assert re.fullmatch(r"\d{4}-\d{2}", doc["checked"]), key
    used = set()
    for gpu in data["gpus"]:
        figures = [*gpu["matmul_tflops"].values(), gpu["memory_gbps"]]
        if "nvlink" in gpu:
            figures.append(gpu["nvlink"])
        for figure in figures:
            assert figure["source"] in documents, (gpu["model"], figure)
            used.add(figure["source"])
        assert set(gpu["matmul_tflops"]) <= set(MATMUL_DTYPES), gpu["model"]
    for table in ("pcie_lane_gbps", "nvlink_link_gbps"):
        assert data[table]["source"] in documents
        used.add(data[table]["source"])
    assert used == set(documents)  # no document cited by nothing


def test_every_threshold_says_what_it_was_chosen_from() -> None:
    reference = load()
    for name, threshold in reference.thresholds.items():
        assert 0 < threshold.fail_below < threshold.warn_below <= 1, name
        assert len(threshold.basis) > 60, name
    assert {
        "matmul",
        "membw",
        "transfer",
        "allreduce_nvlink",
        "allreduce_pcie",
        "training_mfu",
        "clocks",
        "siblings",
    } <= set(reference.thresholds)


def test_a_figure_without_a_source_is_refused() -> None:
    data = raw()
    data["gpus"][0]["memory_gbps"] = {"value": 732}
    with pytest.raises(ValueError, match="needs a value and a source"):
        parse(data)


@pytest.mark.parametrize(
    ("device_id", "model"),
    [
        (0x15F8, "Tesla P100 PCIe 16GB"),
        (0x1DB1, "Tesla V100 SXM2 16GB/32GB"),
        (0x1EB8, "Tesla T4"),
        (0x2236, "A10"),
        (0x20B0, "A100 SXM4 40GB"),
        (0x20B2, "A100 SXM4 80GB"),
        (0x20F1, "A100 PCIe 40GB"),
        (0x20B5, "A100 PCIe 80GB"),
        (0x27B8, "L4"),
        (0x26B9, "L40S"),
        (0x2330, "H100 SXM5 80GB"),
        (0x2331, "H100 PCIe 80GB"),
        (0x2335, "H200 SXM 141GB"),
        (0x2901, "B200 (HGX, 1000 W)"),
    ],
)
def test_the_gpus_asked_for_are_in_the_table(device_id: int, model: str) -> None:
    found = load().model_for(device_id)
    assert found is not None and found.model == model
    assert found.matmul_tflops["float32"].value > 0 and found.memory_gbps.value > 0


def test_dense_peaks_are_ordered_as_the_hardware_is() -> None:
    """A sparsity figure slipping in (2× dense) would break these orderings."""
    for gpu in load().gpus:
        peaks = {k: f.value for k, f in gpu.matmul_tflops.items()}
        if "tensorfloat32" in peaks:
            assert peaks["float32"] < peaks["tensorfloat32"] < peaks["bfloat16"], gpu.model
            assert peaks["bfloat16"] == peaks["float16"], gpu.model
            assert peaks["bfloat16"] == pytest.approx(2 * peaks["tensorfloat32"], rel=0.03), (
                gpu.model
            )
        assert peaks["float16"] >= 2 * peaks["float32"] * 0.99, gpu.model


def _blocks() -> list[tuple[int, int, str, str]]:
    table = yaml.safe_load(GENERATIONS.read_text())["__nvidia_driver_gpu_generations"]
    blocks = []
    for generation in table:
        for ids in generation["ids"]:
            first, _, last = str(ids).partition("-")
            lo = int(first, 16) if isinstance(ids, str) else int(ids)
            hi = int(last, 16) if last else lo
            blocks.append((lo, hi, generation["generation"], generation["compute_capability"]))
    return blocks


def test_pci_ids_agree_with_the_driver_roles_generation_table() -> None:
    """One source of ID facts: each ID sits in the role's block of its compute capability."""
    blocks = _blocks()
    for gpu in load().gpus:
        for device_id in gpu.pci_device_ids:
            hits = [b for b in blocks if b[0] <= device_id <= b[1]]
            assert len(hits) == 1, (gpu.model, hex(device_id), hits)
            assert hits[0][3] == gpu.compute_capability, (gpu.model, hits[0])


def test_the_table_ships_in_the_package() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["workloads"]
    assert any(Path("hardware/reference.yaml").match(p) for p in patterns)


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [0, 1, 2, 3]),
        ("2,0", [2, 0]),
        ("GPU-bbbb", [1]),
        ("3,9,1", [3]),  # CUDA stops at the first entry that names no GPU
        ("", []),
        ("GPU-", []),  # a prefix of several UUIDs names none
    ],
)
def test_visible_gpus_map_to_nvml_indices(visible: str | None, expected: list[int]) -> None:
    gpus = [{"index": i, "uuid": f"GPU-{c * 4}-0"} for i, c in enumerate("abcd")]
    assert identify.visible_nvml_indices(visible, gpus) == expected
