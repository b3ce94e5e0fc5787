#!/usr/bin/python
"""Ansible module: find the GPUs to pass through and read their IOMMU groups from sysfs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: gpu_passthrough_facts
short_description: Find the GPUs to pass through and read their IOMMU groups
description:
  - Reads C(/sys/bus/pci/devices) and C(/sys/kernel/iommu_groups) (the same data C(lspci -nn) and
    C(find /sys/kernel/iommu_groups) show) and decides which PCI functions go to C(vfio-pci).
  - GPUs are display controllers (PCI class 03xx) of the given vendors, or the given addresses or
    vendor:device IDs. The other functions of a GPU's slot (its HDMI audio, USB-C controller)
    follow it, because they share its reset and its IOMMU group.
  - Reports every IOMMU group that holds a selected function, and the members of those groups
    that are not passed through and are not PCI bridges (vfio needs the whole group).
  - The sysfs root is a parameter so that the logic can be tested against a fake tree.
options:
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
  vendors:
    description: PCI vendor IDs whose display controllers count as GPUs (10de is NVIDIA).
    type: list
    elements: str
    default: ["10de"]
  ids:
    description: vendor:device IDs to bind to vfio-pci; when set, they select the devices.
    type: list
    elements: str
    default: []
  addresses:
    description:
      - PCI addresses (0000:65:00.0 or 65:00.0) to pass through; when set, they select the devices.
    type: list
    elements: str
    default: []
  include_functions:
    description: Also pass through the other functions of each selected device's slot.
    type: bool
    default: true
author: tf-gpu-host
"""

RETURN = r"""
iommu_enabled:
  description: Whether the kernel has IOMMU groups (false until booted with the IOMMU on).
  type: bool
devices:
  description: Every PCI function (address, vendor, device, id, class, driver, iommu_group).
  type: list
selected:
  description: The functions to pass through.
  type: list
ids:
  description: Sorted vendor:device IDs for C(options vfio-pci ids=...).
  type: list
groups:
  description: IOMMU groups holding a selected function, with all their members.
  type: list
conflicts:
  description: Group members that are neither passed through nor PCI bridges.
  type: list
collateral:
  description: Functions not selected whose ID is bound, which vfio-pci would take as well.
  type: list
missing_ids:
  description: Requested IDs that no present device has.
  type: list
"""

ID = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{4}$")
ADDRESS = re.compile(r"^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])$")
BRIDGE_CLASS = "0604"
CLASS_NAMES = {
    "0200": "Ethernet controller", "0300": "VGA compatible controller",
    "0302": "3D controller", "0380": "Display controller", "0403": "Audio device",
    "0600": "Host bridge", "0604": "PCI bridge", "0c03": "USB controller",
    "0c80": "Serial bus controller", "0106": "SATA controller", "0108": "NVMe controller",
}


class SelectionError(ValueError):
    """A request that cannot be satisfied; the message says what to change."""


@dataclass(frozen=True)
class PciFunction:
    address: str
    vendor: str
    device: str
    pci_class: str  # 6 hex digits, e.g. 030200
    driver: str
    iommu_group: str
    description: str

    @property
    def id(self) -> str:
        return f"{self.vendor}:{self.device}"

    @property
    def slot(self) -> str:
        return self.address.rsplit(".", 1)[0]

    @property
    def is_display(self) -> bool:
        return self.pci_class.startswith("03")

    @property
    def is_bridge(self) -> bool:
        return self.pci_class.startswith(BRIDGE_CLASS)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["id"] = self.id
        return data


def _read_hex(path: str) -> str:
    with open(path) as handle:
        return handle.read().strip().lower().removeprefix("0x")


def _link_name(path: str) -> str:
    return os.path.basename(os.readlink(path)) if os.path.islink(path) else ""


def normalize_address(address: str) -> str:
    """0000:65:00.0 from '65:00.0' or '0000:65:00.0'; SelectionError for anything else."""
    match = ADDRESS.match(address.strip().lower())
    if match is None:
        raise SelectionError(
            f"'{address}' is not a PCI address; write it as lspci -D prints it, e.g. 0000:65:00.0"
        )
    domain, bus, slot, function = match.groups()
    return f"{domain or '0000'}:{bus}:{slot}.{function}"


def normalize_id(pci_id: str) -> str:
    value = pci_id.strip().lower()
    if ID.match(value) is None:
        raise SelectionError(
            f"'{pci_id}' is not a vendor:device ID; write it as lspci -nn prints it, e.g. 10de:15f8"
        )
    return value


def lspci_descriptions(sysfs_root: str) -> dict[str, str]:
    """Human names from `lspci -D -mm` when reading the live system (empty otherwise)."""
    if os.path.realpath(sysfs_root) != "/sys" or shutil.which("lspci") is None:
        return {}
    result = subprocess.run(["lspci", "-D", "-mm"], capture_output=True, text=True, check=False)
    names = {}
    for line in result.stdout.splitlines():
        fields = re.findall(r'"([^"]*)"|(\S+)', line)
        values = [quoted or bare for quoted, bare in fields]
        if len(values) >= 4:
            names[values[0]] = f"{values[1]}: {values[2]} {values[3]}"
    return names


def read_functions(sysfs_root: str) -> list[PciFunction]:
    """Every PCI function under sysfs_root, sorted by address."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    if not os.path.isdir(base):
        raise SelectionError(f"{base} does not exist; is sysfs mounted at {sysfs_root}?")
    names = lspci_descriptions(sysfs_root)
    functions = []
    for address in sorted(os.listdir(base)):
        path = os.path.join(base, address)
        pci_class = _read_hex(os.path.join(path, "class"))
        functions.append(PciFunction(
            address=address,
            vendor=_read_hex(os.path.join(path, "vendor")),
            device=_read_hex(os.path.join(path, "device")),
            pci_class=pci_class,
            driver=_link_name(os.path.join(path, "driver")),
            iommu_group=_link_name(os.path.join(path, "iommu_group")),
            description=names.get(address, CLASS_NAMES.get(pci_class[:4], f"class {pci_class}")),
        ))
    return functions


def iommu_enabled(sysfs_root: str) -> bool:
    groups = os.path.join(sysfs_root, "kernel", "iommu_groups")
    return os.path.isdir(groups) and len(os.listdir(groups)) > 0


def select(functions: list[PciFunction], vendors: list[str], ids: list[str],
           addresses: list[str], include_functions: bool) -> list[PciFunction]:
    """The functions to pass through; see the module documentation for the rules."""
    by_address = {function.address: function for function in functions}
    if addresses:
        wanted = [normalize_address(address) for address in addresses]
        absent = [address for address in wanted if address not in by_address]
        if absent:
            raise SelectionError(
                f"no PCI device at {', '.join(absent)}; list them with `lspci -D -nn` and "
                "correct gpu_passthrough_addresses"
            )
        chosen = [by_address[address] for address in wanted]
    elif ids:
        wanted_ids = {normalize_id(pci_id) for pci_id in ids}
        chosen = [function for function in functions if function.id in wanted_ids]
    else:
        wanted_vendors = {vendor.strip().lower().removeprefix("0x") for vendor in vendors}
        chosen = [function for function in functions
                  if function.is_display and function.vendor in wanted_vendors]
    if include_functions:
        slots = {function.slot for function in chosen}
        chosen = [function for function in functions if function.slot in slots]
    return sorted(set(chosen), key=lambda function: function.address)


def inspect(sysfs_root: str, vendors: list[str], ids: list[str], addresses: list[str],
            include_functions: bool) -> dict[str, Any]:
    """Everything the role needs to decide, configure and report; raises SelectionError."""
    functions = read_functions(sysfs_root)
    selected = select(functions, vendors, ids, addresses, include_functions)
    requested_ids = sorted({normalize_id(pci_id) for pci_id in ids})
    bound_ids = sorted(set(requested_ids) | {function.id for function in selected})
    chosen = {function.address for function in selected}
    group_names = sorted({function.iommu_group for function in selected if function.iommu_group},
                         key=lambda name: int(name) if name.isdigit() else 0)
    groups, conflicts = [], []
    for name in group_names:
        members = [function for function in functions if function.iommu_group == name]
        groups.append({
            "group": name,
            "devices": [dict(function.as_dict(), passthrough=function.address in chosen)
                        for function in members],
        })
        conflicts += [
            dict(function.as_dict(), group=name) for function in members
            if function.address not in chosen and not function.is_bridge
        ]
    present_ids = {function.id for function in functions}
    return {
        "iommu_enabled": iommu_enabled(sysfs_root),
        "devices": [function.as_dict() for function in functions],
        "selected": [function.as_dict() for function in selected],
        "ids": bound_ids,
        "groups": groups,
        "conflicts": conflicts,
        "collateral": [function.as_dict() for function in functions
                       if function.id in bound_ids and function.address not in chosen],
        "missing_ids": [pci_id for pci_id in requested_ids if pci_id not in present_ids],
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "path", "default": "/sys"},
            "vendors": {"type": "list", "elements": "str", "default": ["10de"]},
            "ids": {"type": "list", "elements": "str", "default": []},
            "addresses": {"type": "list", "elements": "str", "default": []},
            "include_functions": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = inspect(params["sysfs_root"], params["vendors"], params["ids"],
                         params["addresses"], params["include_functions"])
    except (SelectionError, OSError) as error:
        module.fail_json(msg=str(error))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
