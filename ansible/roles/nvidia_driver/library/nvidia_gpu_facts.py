#!/usr/bin/python
"""Ansible module: read the NVIDIA GPUs and NVSwitches from PCI sysfs and choose the module flavour.

Why a module and not nvidia-smi: the decision must be made before any driver
is installed (nvidia-smi does not exist yet), and a wrong flavour or branch
must be refused before anything on the host changes.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Find the NVIDIA GPUs and NVSwitches on PCI and choose the kernel-module flavour
description:
  - Reads C(vendor), C(device) and C(class) of every function under C(pci_devices_path) (what
    C(lspci -Dnn) shows). NVIDIA (10de) display controllers (class 03xx) are GPUs; NVIDIA
    bridges of subclass "other" (class 0680) are NVSwitches.
  - Looks every GPU up in the generation table (the role's vars/gpu_generations.yml) and decides
    the flavour C(open) or C(proprietary). C(auto) picks open when every GPU can use it, else
    proprietary when every GPU can use that; an explicit flavour, a branch without support for
    a present GPU, or a GPU below the minimum compute capability fails, naming the card.
  - Changes nothing, so it runs in check mode too.
options:
  pci_devices_path:
    description: Directory of PCI functions (a fake tree in tests).
    type: path
    default: /sys/bus/pci/devices
  generations:
    description: The generation table (list of dicts with ids, flavours, branches).
    type: list
    elements: dict
    required: true
  kernel_modules:
    description: C(auto), C(open) or C(proprietary).
    type: str
    default: auto
  branch:
    description: The driver branch to install, e.g. "570".
    type: str
    required: true
  min_compute_capability:
    description: Every GPU must have at least this compute capability.
    type: str
    default: "5.2"
  retired_flavours:
    description: Flavours a branch no longer ships, as flavour -> first branch without it
      (C({"proprietary": "620"})); choosing one on such a branch fails.
    type: dict
    default: {}
author: tf-gpu-host
"""

RETURN = r"""
gpus:
  description: NVIDIA GPUs (address, device_id, generation, compute_capability, flavours).
  type: list
nvswitches:
  description: NVIDIA NVSwitch functions (address, device_id).
  type: list
flavour:
  description: The kernel-module flavour to install (open or proprietary).
  type: str
nvlink5:
  description: Whether a GPU sits on an NVLink 5 (fourth-generation NVSwitch) baseboard.
  type: bool
fabric_manager:
  description: Whether Fabric Manager is needed (NVSwitches present, or an NVLink 5 baseboard).
  type: bool
unknown:
  description: GPUs whose device ID is not in the table (assumed to take the open modules only).
  type: list
"""

NVIDIA = 0x10DE
FLAVOURS = ("open", "proprietary")


class Refused(Exception):
    """A host this branch and flavour cannot drive; the message names the card and the fix."""


@dataclass(frozen=True)
class Gpu:
    address: str
    device_id: str
    generation: str
    compute_capability: str
    flavours: tuple[str, ...]
    first_branch: str
    last_branch: str
    nvlink5: bool

    @property
    def label(self) -> str:
        return f"{self.address} (10de:{self.device_id}, {self.generation})"


def _hex(path: str) -> int:
    with open(path) as handle:
        return int(handle.read().strip(), 16)


def read_pci(pci_devices_path: str) -> list[tuple[str, int, int]]:
    """(address, device ID, class) of every NVIDIA PCI function, sorted by address."""
    if not os.path.isdir(pci_devices_path):
        return []
    found = []
    for address in sorted(os.listdir(pci_devices_path)):
        base = os.path.join(pci_devices_path, address)
        try:
            if _hex(os.path.join(base, "vendor")) != NVIDIA:
                continue
            found.append((address, _hex(os.path.join(base, "device")),
                          _hex(os.path.join(base, "class"))))
        except (OSError, ValueError):
            continue  # a function without readable IDs is not one we can judge
    return found


def _parse_block(block: str | int) -> tuple[int, int]:
    if isinstance(block, int):  # YAML read a lone 0x1234 as a number
        return block, block
    first, _, last = block.partition("-")
    return int(first, 16), int(last or first, 16)


def lookup(device_id: int, generations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The table row whose ID blocks hold device_id."""
    for row in generations:
        for block in row["ids"]:
            first, last = _parse_block(block)
            if first <= device_id <= last:
                return row
    return None


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def classify(functions: list[tuple[str, int, int]],
             generations: list[dict[str, Any]]) -> tuple[list[Gpu], list[dict[str, str]]]:
    """Split NVIDIA functions into GPUs (class 03xx) and NVSwitches (class 0680xx)."""
    gpus: list[Gpu] = []
    switches: list[dict[str, str]] = []
    for address, device_id, pci_class in functions:
        device = f"{device_id:04x}"
        if pci_class >> 16 == 0x03:
            row = lookup(device_id, generations)
            if row is None:
                gpus.append(Gpu(address, device, "unknown", "", ("open",), "", "", False))
            else:
                gpus.append(Gpu(address, device, row["generation"], str(row["compute_capability"]),
                                tuple(row["flavours"]), str(row.get("first_branch") or ""),
                                str(row.get("last_branch") or ""), bool(row.get("nvlink5"))))
        elif pci_class >> 8 == 0x0680:
            switches.append({"address": address, "device_id": device})
    return gpus, switches


def _cards(gpus: list[Gpu]) -> str:
    return ", ".join(gpu.label for gpu in gpus)


def check_branch(gpus: list[Gpu], branch: str) -> None:
    """Refuse a branch that does not support a present GPU."""
    number = int(branch)
    too_new = [gpu for gpu in gpus if gpu.last_branch and number > int(gpu.last_branch)]
    if too_new:
        last = min(int(gpu.last_branch) for gpu in too_new)
        raise Refused(
            f"driver branch {branch} does not support {_cards(too_new)}: the last branch for "
            f"{', '.join(sorted({gpu.generation for gpu in too_new}))} is {last}. Nothing was "
            f"changed. Fix: set nvidia_driver_branch: \"{last}\" (or older), or move the card "
            f"to another host.")
    too_old = [gpu for gpu in gpus if gpu.first_branch and number < int(gpu.first_branch)]
    if too_old:
        first = max(int(gpu.first_branch) for gpu in too_old)
        raise Refused(
            f"driver branch {branch} predates {_cards(too_old)}, first supported by branch "
            f"{first}. Nothing was changed. Fix: set nvidia_driver_branch: \"{first}\" or newer.")


def check_compute_capability(gpus: list[Gpu], minimum: str) -> None:
    """Keep TensorFlow's floor: refuse a known GPU below it before installing anything."""
    low = [gpu for gpu in gpus
           if gpu.compute_capability and _version(gpu.compute_capability) < _version(minimum)]
    if low:
        raise Refused(
            f"{_cards(low)} has compute capability "
            f"{', '.join(sorted({gpu.compute_capability for gpu in low}))}; TensorFlow needs "
            f"{minimum} or newer. Nothing was changed. Fix: run on a newer GPU (Maxwell GM20x or "
            f"later), or take this host out of the inventory.")


def check_flavour_in_branch(requested: str, branch: str, retired: dict[str, str]) -> None:
    """Refuse a flavour the branch no longer ships (proprietary modules end before 620)."""
    gone_from = retired.get(requested)
    if gone_from and int(branch) >= int(gone_from):
        raise Refused(
            f"driver branch {branch} ships no {requested} kernel modules (NVIDIA dropped them "
            f"from branch {gone_from} on). Nothing was changed. Fix: set "
            f"nvidia_driver_kernel_modules: auto (open on Turing and newer), or keep "
            f"{requested} with an nvidia_driver_branch before {gone_from}.")


def choose_flavour(gpus: list[Gpu], requested: str) -> str:
    """The flavour every GPU can use: the requested one, or for auto open before proprietary."""
    if requested not in ("auto", *FLAVOURS):
        raise Refused(f"nvidia_driver_kernel_modules is '{requested}'. Fix: set it to auto, open "
                      f"or proprietary.")
    if requested in FLAVOURS:
        unfit = [gpu for gpu in gpus if requested not in gpu.flavours]
        if unfit:
            works = sorted({flavour for gpu in unfit for flavour in gpu.flavours})
            raise Refused(
                f"the {requested} kernel modules cannot drive {_cards(unfit)}; "
                f"{' or '.join(works)} can. Nothing was changed. Fix: set "
                f"nvidia_driver_kernel_modules: auto (or {works[0]}).")
        return requested
    if not gpus:
        return "open"  # NVIDIA's default since 560; a GPU-less host has nothing to constrain it
    common = [flavour for flavour in FLAVOURS if all(flavour in gpu.flavours for gpu in gpus)]
    if not common:
        by_flavour = {
            flavour: [gpu for gpu in gpus if flavour in gpu.flavours] for flavour in FLAVOURS}
        raise Refused(
            "no kernel-module flavour drives every GPU on this host: only open drives "
            f"{_cards(by_flavour['open'])}, only proprietary drives "
            f"{_cards(by_flavour['proprietary'])}. Nothing was changed. Fix: put these GPUs "
            f"in different hosts.")
    return common[0]


def decide(pci_devices_path: str, generations: list[dict[str, Any]], kernel_modules: str,
           branch: str, min_compute_capability: str,
           retired_flavours: dict[str, str] | None = None) -> dict[str, Any]:
    """Everything the role needs: the devices, the flavour, and whether a fabric needs managing."""
    gpus, switches = classify(read_pci(pci_devices_path), generations)
    check_compute_capability(gpus, min_compute_capability)
    check_branch(gpus, branch)
    flavour = choose_flavour(gpus, kernel_modules)
    # After the GPU checks: a pre-Turing card on such a branch is refused by its own
    # last branch, which names the fix that works for it.
    check_flavour_in_branch(flavour, branch, retired_flavours or {})
    nvlink5 = any(gpu.nvlink5 for gpu in gpus)
    return {
        "gpus": [{**asdict(gpu), "label": gpu.label} for gpu in gpus],
        "nvswitches": switches,
        "flavour": flavour,
        "nvlink5": nvlink5,
        "fabric_manager": bool(switches) or nvlink5,
        "unknown": [gpu.label for gpu in gpus if gpu.generation == "unknown"],
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pci_devices_path": {"type": "path", "default": "/sys/bus/pci/devices"},
            "generations": {"type": "list", "elements": "dict", "required": True},
            "kernel_modules": {"type": "str", "default": "auto"},
            "branch": {"type": "str", "required": True},
            "min_compute_capability": {"type": "str", "default": "5.2"},
            "retired_flavours": {"type": "dict", "default": {}},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not str(params["branch"]).isdigit():
        module.fail_json(msg=f"nvidia_driver_branch is '{params['branch']}'. Fix: set it to a "
                             f"driver branch number such as \"570\".")
    try:
        result = decide(params["pci_devices_path"], params["generations"],
                        params["kernel_modules"], str(params["branch"]),
                        params["min_compute_capability"],
                        {str(key): str(value) for key, value in params["retired_flavours"].items()})
    except Refused as refusal:
        module.fail_json(msg=f"Refusing to install the NVIDIA driver: {refusal}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
