"""The reference table: a source on every figure, the GPUs asked for, IDs as the driver role has."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import cast

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
        if gpu.get("identified_by"):
            assert gpu["identified_by"] in documents, gpu["model"]
            used.add(gpu["identified_by"])
        figures = [*gpu["matmul_tflops"].values()]
        if gpu["memory_gbps"] is not None:
            figures.append(gpu["memory_gbps"])
        if "nvlink" in gpu:
            figures.append(gpu["nvlink"])
        for figure in figures:
            assert figure["source"] in documents, (gpu["model"], figure)
            used.add(figure["source"])
        assert set(gpu["matmul_tflops"]) <= set(MATMUL_DTYPES), gpu["model"]
    for table in ("pcie_lane_gbps", "nvlink_link_gbps"):
        assert data[table]["source"] in documents
        used.add(data[table]["source"])
    for threshold in data["thresholds"].values():
        assert threshold["documents"], threshold
        assert set(threshold["documents"]) <= set(documents), threshold
        used.update(threshold["documents"])
    assert data["pci_device_ids_source"] in documents
    used.add(data["pci_device_ids_source"])
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
        (0x2901, "B200 (HGX B200)"),
        (0x2909, "B200 (HGX B200)"),
        (0x20B1, "A100 PCIe 40GB"),
        (0x2339, "H100 SXM5 64GB/94GB/96GB"),
    ],
)
def test_the_gpus_asked_for_are_in_the_table(device_id: int, model: str) -> None:
    found = load().model_for(device_id)
    assert found is not None and found.model == model
    assert found.matmul_tflops["float32"].value > 0
    assert found.memory_gbps is None or found.memory_gbps.value > 0


def test_dense_peaks_are_ordered_as_the_hardware_is() -> None:
    """A sparsity figure slipping in (2× dense) would break these orderings."""
    for gpu in load().gpus:
        peaks = {k: f.value for k, f in gpu.matmul_tflops.items()}
        if not peaks:
            continue  # a variant no document describes: no figure to order
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


# --- every shipping variant the PCI ID repository names ------------------------------------

PCI_IDS = Path("/usr/share/misc/pci.ids")  # Debian's pci.ids package (install-test-deps.sh)
NVIDIA = "10de"


def nvidia_devices(text: str) -> dict[int, str]:
    """NVIDIA's device IDs and names from the PCI ID repository's file format.

    A vendor line is ``10de  NVIDIA Corporation``; its devices follow as one tab, four hex
    digits, two spaces and the name; subsystem lines (two tabs) and comments are skipped;
    the next vendor line ends the section.
    """
    devices: dict[int, str] = {}
    inside = False
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if not line.startswith("\t"):
            inside = line.startswith(f"{NVIDIA}  ")
            continue
        match = re.fullmatch(r"\t([0-9a-f]{4})  (.+)", line)
        if inside and match:
            devices[int(match[1], 16)] = match[2]
    return devices


def family(product: str) -> str:
    """A product name's family: its first word before a space or a hyphen, ``Tesla``/``HGX``
    dropped (``Tesla P100-DGXS-16GB`` and ``Tesla P100 PCIe 16GB`` are both ``P100``)."""
    return re.split(r"[ -]", re.sub(r"^(Tesla|HGX) ", "", product), maxsplit=1)[0]


def families() -> set[str]:
    """The GPU families the table models."""
    return {family(gpu.model) for gpu in load().gpus}


def variants(devices: dict[int, str], known: set[str]) -> dict[int, str]:
    """Every device the repository names as a GPU of a modelled family.

    The product name (in brackets) of the family, whatever follows: sized
    (``[H100 SXM5 64GB]``), hyphenated (``[A100-SXM-64GB]``, ``[Tesla P100-DGXS-16GB]``,
    board codes such as ``[A100-PG506-207]``) or bare (``[H100]``). Not a GPU: the
    family's NVSwitch chip (``[H100 NVSwitch]``). Other parts that only share a prefix
    (``[A100X]``, ``[H100L 94GB]``, the H100 NVL, modelled by its own entry) are other
    families by this rule.
    """
    found = {}
    for device_id, name in devices.items():
        bracket = re.search(r"\[(.*)\]", name)
        if not bracket or "NVSwitch" in bracket[1]:
            continue
        if family(bracket[1]) in known:
            found[device_id] = name
    return found


def test_the_pci_ids_file_is_the_one_the_setup_installs() -> None:
    text = PCI_IDS.read_text(errors="replace")
    version = re.search(r"^#\s+Version: (\S+)", text, re.M)
    assert version, "no Version line: not the PCI ID repository's file"
    assert 0x2335 in nvidia_devices(text), (
        f"{PCI_IDS} (version {version[1]}) predates the H200: run scripts/install-test-deps.sh"
    )


def test_every_variant_the_pci_id_repository_names_is_in_the_table() -> None:
    devices = nvidia_devices(PCI_IDS.read_text(errors="replace"))
    table = load()
    missing = {
        f"{device_id:#06x}": name
        for device_id, name in variants(devices, families()).items()
        if table.model_for(device_id) is None
    }
    assert missing == {}


def test_every_id_in_the_table_is_named_as_its_family_by_the_repository() -> None:
    devices = nvidia_devices(PCI_IDS.read_text(errors="replace"))
    for gpu in load().gpus:
        for device_id in gpu.pci_device_ids:
            assert device_id in devices, (gpu.model, hex(device_id))
            assert family(gpu.model) in devices[device_id], (gpu.model, hex(device_id))


def test_the_variant_rule_on_the_repository_s_own_lines() -> None:
    """The parser and the rule, on lines in the file's format (tabs, two spaces)."""
    text = (
        "# comment\n10de  NVIDIA Corporation\n"
        "\t2337  GH100 [H100 SXM5 64GB]\n\t\t10de 16c1  H100 SXM5 64GB\n"
        "\t20f0  GA100 [A100-PG506-207]\n\t20b8  GA100 [A100X]\n"
        "\t1db7  GV100GL [Tesla V100 DGXS 32GB]\n\t2909  GB100 [HGX B200 168GB]\n"
        "\t2331  GH100 [H100 PCIe]\n\t22a3  GH100 [H100 NVSwitch]\n"
        "10df  Emulex Corporation\n\t2338  Not NVIDIA 96GB\n"
    )
    devices = nvidia_devices(text)
    assert set(devices) == {0x2337, 0x20F0, 0x20B8, 0x1DB7, 0x2909, 0x2331, 0x22A3}
    assert set(variants(devices, {"H100", "A100", "V100", "B200"})) == {
        0x2337, 0x20F0, 0x1DB7, 0x2909, 0x2331}


# The variants the last rule missed (hyphenated, unsized): each found, each in the table.
NAMED_ONLY = {0x20B3: "A100-SXM-64GB", 0x15FC: "Tesla P100-DGXS-16GB", 0x2336: "H100"}


@pytest.mark.parametrize("device_id", sorted(NAMED_ONLY))
def test_hyphenated_and_unsized_variants_are_found_and_a_removed_one_fails(
    device_id: int,
) -> None:
    devices = nvidia_devices(PCI_IDS.read_text(errors="replace"))
    assert f"[{NAMED_ONLY[device_id]}]" in devices[device_id]
    assert device_id in variants(devices, families())
    data = raw()
    for gpu in data["gpus"]:
        gpu["pci_device_ids"] = [i for i in gpu["pci_device_ids"] if int(i) != device_id]
    data["gpus"] = [gpu for gpu in data["gpus"] if gpu["pci_device_ids"]]
    without = parse(data)
    missing = [i for i in variants(devices, families()) if without.model_for(i) is None]
    assert missing == [device_id]


def test_a_variant_without_a_document_has_no_figure_and_says_so() -> None:
    """0x233D (H100 96GB) and the H100 SXM5 64/94/96 GB NVLinks: no document, no figure."""
    table = load()
    bare = table.model_for(0x233D)
    assert bare is not None and bare.matmul_tflops == {} and bare.memory_gbps is None
    assert bare.nvlink is None
    sxm = table.model_for(0x2338)
    assert sxm is not None and sxm.nvlink is None
    for device_id in NAMED_ONLY:
        model = table.model_for(device_id)
        assert model is not None and not model.matmul_tflops and model.memory_gbps is None


def test_a_model_without_figures_reads_no_sourced_figure_in_its_rows() -> None:
    from workloads.accept import checks
    from workloads.accept.kernels import Device, Kernels

    class OneRate:
        backend = "recorded"

        def placed(self, device: object, dtype: str) -> object:
            import contextlib

            return contextlib.nullcontext()

        def copy_rate(self, *args: object) -> float:
            return 1e12

    table = load()
    target = checks.Target(Device("GPU", 0, "NVIDIA H100", None, (9, 0)), None,
                           table.model_for(0x2336))
    assert checks.matmul_dtypes(target) == ["float32", "tensorfloat32", "bfloat16", "float16"]
    sizes = checks.sizes(True, True)
    kernels = cast(Kernels, OneRate())  # a copy rate is all the membw check asks for
    [row] = checks.check_membw(kernels, [target], sizes, table, lambda _: None)
    assert row.verdict == "info" and "no sourced figure for H100 (unnamed variant)" in row.reason
