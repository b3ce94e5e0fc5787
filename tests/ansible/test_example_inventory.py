"""The example inventory shows the roles' defaults, so that a copy of it behaves like them.

Why a test: people start from `cp -r inventory ~/my-inventory` (ansible/README.md),
and whatever the example sets, every copied site sets. It used to set
`nvidia_driver_kernel_modules: open` over the default `auto`: every copied
inventory then refused every Maxwell, Pascal and Volta host (the seed's P100s
among them), where `auto` would have chosen the proprietary modules. The rule:
a role variable the example sets equals that role's default, unless it is one of
SITE_CHOICES below, each with the reason no default can serve a GPU site there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from tests.ansible.playbook import ANSIBLE_DIR, REPO

INVENTORY = ANSIBLE_DIR / "inventory"

# Role variables the example sets to something else than the default, and why.
SITE_CHOICES: dict[str, str] = {
    "nvidia_driver_require_gpu": "every host in gpu_hosts has GPUs: none showing up is an error",
    "gpu_validate_require_gpu": "every host in gpu_hosts has GPUs: none showing up is an error",
    "gpu_passthrough_ids": "the hypervisor's own GPUs (PCI IDs): no default can name them",
}


def _defaults() -> dict[str, Any]:
    """Every role's defaults/main.yml, merged (role variables carry the role's prefix)."""
    merged: dict[str, Any] = {}
    for path in sorted((ANSIBLE_DIR / "roles").glob("*/defaults/main.yml")):
        merged.update(yaml.safe_load(path.read_text()) or {})
    return merged


def _inventory_groups(node: dict[str, Any], where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, variables) for every group's and host's variables in hosts.yml."""
    yield where, node.get("vars") or {}
    for host, variables in (node.get("hosts") or {}).items():
        yield f"{where} host {host}", variables or {}
    for child, group in (node.get("children") or {}).items():
        yield from _inventory_groups(group or {}, f"hosts.yml group {child}")


def _settings() -> list[tuple[str, str, Any]]:
    """(file and place, variable, value) for everything the example inventory sets."""
    found: list[tuple[str, str, Any]] = []
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    for group, node in hosts.items():
        for where, variables in _inventory_groups(node or {}, f"hosts.yml group {group}"):
            found += [(where, name, value) for name, value in variables.items()]
    for path in sorted(INVENTORY.glob("*_vars/**/*.yml")):
        text = path.read_text()
        if text.startswith("$ANSIBLE_VAULT"):
            continue  # the vault holds secrets (ngc_api_key), no role defaults
        where = str(path.relative_to(REPO))
        found += [(where, name, value) for name, value in (yaml.safe_load(text) or {}).items()]
    return found


DEFAULTS = _defaults()
SETTINGS = _settings()


def test_the_example_sets_role_variables_at_all() -> None:
    """A scan that finds nothing would pass anything."""
    names = {name for _, name, _ in SETTINGS}
    assert "nvidia_driver_kernel_modules" in names and "nvidia_driver_branch" in names


ROLE_SETTINGS = [s for s in SETTINGS if s[1] in DEFAULTS and s[1] not in SITE_CHOICES]


@pytest.mark.parametrize(("where", "name", "value"), ROLE_SETTINGS,
                         ids=[f"{s[0]}:{s[1]}" for s in ROLE_SETTINGS])
def test_example_repeats_the_default_unless_it_is_a_site_choice(where: str, name: str,
                                                                value: Any) -> None:
    assert value == DEFAULTS[name], (
        f"{where} sets {name}: {value!r}, the role's default is {DEFAULTS[name]!r}: every copy "
        f"of the example would override it. Show the default, or list it in SITE_CHOICES "
        f"with the reason no default can serve there.")


def test_every_site_choice_is_a_role_variable_the_example_sets() -> None:
    """A site choice nobody sets any more, or a typo in one, must not linger in the list."""
    names = {name for _, name, _ in SETTINGS}
    assert sorted(set(SITE_CHOICES) - (names & set(DEFAULTS))) == []
