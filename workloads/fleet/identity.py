"""Which GPUs a record is of: a GPU of another model than its host's others, a UUID seen twice.

Both are faults no figure shows. A host given one GPU of another model (the wrong spare
after an RMA, a mixed shipment) measures that GPU against its own datasheet and may pass
every row; grouped by its full set of models it would be a group of one, compared with
nothing. So the host is grouped by the model most of its GPUs are (`load.hardware_group`)
and each GPU unlike them fails, named: "GPU 5 is H100 SXM5 96GB where this host's other
GPUs are H100 80GB HBM3".

NVML's UUID is the GPU's own identity, burned into the board ("GPU-" and 16 bytes in hex,
`nvmlDeviceGetUUID`): no two GPUs share one. The same UUID in two records means one
machine measured twice under two names (an inventory alias, a record copied over
another host's), or within one record a GPU counted twice: either way a host's verdict is
not about the machine it names, so every host holding it fails, naming the other.
A record without UUIDs (written before the battery listed them), or with a placeholder
where one should be ("N/A"), is not checked; a UUID in upper case is the same GPU.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

from workloads.fleet.model import Host, Reason
from workloads.fleet.reasons import device_list

VENDOR = "NVIDIA "
# nvmlDeviceGetUUID: "GPU-" and 16 bytes in hex with dashes; a MIG instance's "MIG-..."
UUID_FORM = re.compile(r"(?:gpu|mig|mig-gpu)-[0-9a-f/-]+")  # an old MIG one: MIG-GPU-.../1/0
HEX = frozenset("0123456789abcdef")
WHY_ELSEWHERE = ("one GPU in two records: a machine measured under two names, or a record "
                 "copied over another's; measure each machine under its own name")
WHY_HERE = ("one GPU listed twice: the record was edited or merged; run the battery on this "
            "host again")


def _short(name: str) -> str:
    """ "NVIDIA H100 80GB HBM3" → "H100 80GB HBM3": the vendor is every GPU's here."""
    return name[len(VENDOR):] if name.startswith(VENDOR) else name


def gpu_identity(record: dict[str, Any], gpus: int) -> tuple[list[str], list[str | None]]:
    """Each GPU's model name and UUID, in the order of the record's GPUs.

    Names from `devices` (the battery's per-GPU list), else `env.gpus`; UUIDs from
    `devices` only (None where it has none).
    """
    raw = record.get("devices")
    devices = [d for d in raw if isinstance(d, dict)] if isinstance(raw, list) else []
    env = record.get("env")
    listed = env.get("gpus") if isinstance(env, dict) else None
    names = [str(g.get("name", "GPU")) if isinstance(g, dict) else str(g)
             for g in listed] if isinstance(listed, list) else []
    if len(devices) == gpus and all(d.get("name") for d in devices):
        names = [str(d["name"]) for d in devices]
    uuids: list[str | None] = [nvml_uuid(d.get("uuid"))
                               for d in devices] if len(devices) == gpus else [None] * gpus
    return names[:gpus], uuids


def nvml_uuid(value: object) -> str | None:
    """`value` as NVML writes a UUID (lowercase), or None where it is none.

    The same GPU spelled in upper case or padded (a record edited by hand) is the same GPU;
    a placeholder ("N/A", "[N/A]", "Unknown": nvidia-smi's words for a field not read)
    identifies nothing, and hosts that all hold it do not share a GPU.
    """
    if not isinstance(value, str):
        return None
    text = value.strip().lower()
    if not UUID_FORM.fullmatch(text) or sum(c in HEX for c in text[4:]) < 16:
        return None
    return text[:80]


def model_reasons(devices: list[str], names: list[str], usual: str | None = None
                  ) -> list[Reason]:
    """A `fail` per model that some of the host's GPUs are and most of them (or `usual`'s,
    where a tie was settled by the fleet: `settle_ties`) are not."""
    tally = Counter(names)
    if len(tally) < 2 or len(devices) != len(names):
        return []
    usual = usual or min(tally, key=lambda name: (-tally[name], name))  # as load.hardware_group
    odd: dict[str, list[str | None]] = defaultdict(list)
    for device, name in zip(devices, names, strict=True):
        if name != usual:
            odd[name].append(device)
    reasons = []
    for name, where in sorted(odd.items()):
        verb = "is" if len(where) == 1 else "are"
        reasons.append(Reason("fail", f"{device_list(where)} {verb} {_short(name)} where this "
                                      f"host's other GPUs are {_short(usual)}",
                              tuple(f"{d}: {name}" for d in where if d is not None)))
    return reasons


def settle_ties(hosts: list[Host]) -> list[Host]:
    """Hosts split evenly between models (4 + 4) grouped with the fleet's, not the alphabet's.

    Read alone, a host of four H100s and four A100s has no model most of its GPUs are; the
    record's reader takes the first by name, which would put it in a group of its own and
    name the four GPUs its siblings share as the odd ones ("GPUs 4–7 are H100 ... where this
    host's other GPUs are A100"), sending the operator to swap the wrong four. The fleet
    decides: of the tied models, the one with the most GPUs on the other hosts (then the
    first by name); the host joins that group and the other GPUs are named.
    """
    fleet: Counter[str] = Counter()
    for host in hosts:
        fleet.update(host.gpu_models)
    settled = []
    for host in hosts:
        tally = Counter(host.gpu_models)
        top = max(tally.values(), default=0)
        tied = sorted(name for name, count in tally.items() if count == top)
        if len(tied) < 2 or len(host.gpu_models) != len(host.gpu_devices):
            settled.append(host)
            continue
        others = fleet - tally
        usual = min(tied, key=lambda name: (-others[name], name))
        before = model_reasons(host.gpu_devices, host.gpu_models)
        problems = [p for p in host.problems if p not in before]
        settled.append(replace(host, group=usual, problems=[
            *problems, *model_reasons(host.gpu_devices, host.gpu_models, usual)]))
    return settled


def duplicate_uuid_reasons(hosts: list[Host]) -> dict[str, list[Reason]]:
    """Per host, one `fail` per cause: its GPUs whose UUIDs the same other hosts also hold.

    A whole host recorded twice shares all eight UUIDs with one other host: one line
    ("GPUs 0–7 share their UUIDs with gpu7"), not eight; a GPU counted twice within a
    record is one line too.
    """
    seen: dict[str, list[tuple[str, str]]] = defaultdict(list)  # uuid: (host, device)
    for host in hosts:
        for device, uuid in zip(host.gpu_devices, host.gpu_uuids, strict=False):
            if uuid:
                seen[uuid].append((host.name, device))
    # host: (the other hosts holding them, whether another GPU of the host does): (GPU, UUID)
    causes: dict[str, dict[tuple[tuple[str, ...], bool], list[tuple[str, str]]]] = \
        defaultdict(lambda: defaultdict(list))
    for uuid, holders in seen.items():
        if len(holders) < 2:
            continue
        for name, device in holders:
            others = tuple(sorted({h for h, _ in holders if h != name}))
            within = sum(1 for h, _ in holders if h == name) > 1
            causes[name][(others, within)].append((device, uuid))
    out: dict[str, list[Reason]] = {}
    for name, by_others in causes.items():
        out[name] = []
        for (others, within), found in sorted(by_others.items()):
            gpus: list[str | None] = sorted({d for d, _ in found}, key=_number)
            devices = device_list(gpus)
            where = ", ".join(others[:3]) + (f" and {len(others) - 3} more hosts"
                                             if len(others) > 3 else "")
            if within:
                where = f"{where} and another GPU of this host" if where else \
                    "another GPU of this host"
            what = "shares its UUID" if len(found) == 1 else "share their UUIDs"
            out[name].append(Reason(
                "fail", f"{devices} {what} with {where} ({WHY_ELSEWHERE if others else WHY_HERE})",
                tuple(f"{d}: {u}" for d, u in sorted(set(found)))))
    return out


def _number(device: str | None) -> tuple[int, str]:
    device = device or ""
    tail = device.split()[-1] if device.split() else ""
    return (int(tail) if tail.isdigit() else -1, device)
