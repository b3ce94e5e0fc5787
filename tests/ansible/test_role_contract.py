"""Every role keeps its contract: variables prefixed, declared, documented, defaults agreeing.

Why a test: argument_specs.yml is what rejects a mistyped variable and what
site.yml's misspelling check reads; a default that is missing there, or a
README row that drifted, silently weakens both.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from tests.ansible.playbook import ANSIBLE_DIR, site_role_order

ROLES = ["nvidia_driver", "cuda_toolkit", "cudnn", "docker", "nvidia_container_toolkit", "dcgm",
         "ngc", "tensorflow_host", "gpu_validate"]
# Roles of other playbooks keep the same contract (accept.yml's acceptance).
CONTRACT_ROLES = [*ROLES, "acceptance"]
LAYOUT = ["defaults/main.yml", "meta/main.yml", "meta/argument_specs.yml", "tasks/main.yml",
          "README.md"]


def _yaml(role: str, name: str) -> Any:
    return yaml.safe_load((ANSIBLE_DIR / "roles" / role / name).read_text())


def _options(role: str) -> dict[str, dict[str, Any]]:
    options: dict[str, dict[str, Any]] = _yaml(role, "meta/argument_specs.yml")[
        "argument_specs"]["main"]["options"]
    return options


@pytest.mark.parametrize("role", CONTRACT_ROLES)
def test_role_has_the_standard_layout(role: str) -> None:
    missing = [name for name in LAYOUT if not (ANSIBLE_DIR / "roles" / role / name).is_file()]
    assert missing == []


@pytest.mark.parametrize("role", CONTRACT_ROLES)
def test_every_default_is_prefixed_declared_and_documented(role: str) -> None:
    defaults = _yaml(role, "defaults/main.yml")
    options = _options(role)
    readme = (ANSIBLE_DIR / "roles" / role / "README.md").read_text()
    assert sorted(defaults) == sorted(options), "defaults/main.yml and argument_specs differ"
    for name in defaults:
        assert name.startswith(f"{role}_"), f"{name} lacks the {role}_ prefix"
        assert f"| `{name}` |" in readme, f"{name} is missing from the README table"


@pytest.mark.parametrize("role", CONTRACT_ROLES)
def test_argument_spec_defaults_match_defaults_file(role: str) -> None:
    defaults = _yaml(role, "defaults/main.yml")
    for name, option in _options(role).items():
        if "default" in option:
            assert option["default"] == defaults[name], name


@pytest.mark.parametrize("role", CONTRACT_ROLES)
def test_platform_task_files_exist_where_the_role_branches(role: str) -> None:
    tasks = (ANSIBLE_DIR / "roles" / role / "tasks" / "main.yml").read_text()
    if "setup-{{ ansible_facts['os_family'] }}.yml" in tasks:
        for family in ("Debian", "RedHat"):
            assert (ANSIBLE_DIR / "roles" / role / "tasks" / f"setup-{family}.yml").is_file()


def test_site_runs_the_roles_in_the_documented_order() -> None:
    assert site_role_order() == ROLES
    assert yaml.safe_load((ANSIBLE_DIR / "vars" / "site.yml").read_text())["site_roles"] == ROLES
    tasks = yaml.safe_load((ANSIBLE_DIR / "tasks" / "site-roles.yml").read_text())
    assert [task["tags"] for task in tasks] == [[role] for role in ROLES]


@pytest.mark.parametrize("playbook", ["site.yml", "upgrade.yml"])
def test_site_and_upgrade_share_the_checks_and_the_roles(playbook: str) -> None:
    """Both import the same files: a role or check added to site.yml reaches upgrade.yml."""
    [play] = yaml.safe_load((ANSIBLE_DIR / playbook).read_text())
    imported = [task.get("ansible.builtin.import_tasks") for section in ("pre_tasks", "tasks")
                for task in _flatten(play.get(section) or [])]
    assert "tasks/site-checks.yml" in imported and "tasks/site-roles.yml" in imported
    assert "vars/site.yml" in play["vars_files"]
    site = yaml.safe_load((ANSIBLE_DIR / "site.yml").read_text())[0]
    assert play["gather_subset"] == site["gather_subset"]


def _flatten(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    flat: list[dict[str, Any]] = []
    for task in tasks:
        flat += [task, *_flatten(task.get("block") or [])]
    return flat


def test_every_repository_url_and_key_is_a_variable() -> None:
    """No role hard-codes a repository or key URL in its tasks or templates (mirrors must work)."""
    offenders = [
        str(path.relative_to(ANSIBLE_DIR))
        for path in (ANSIBLE_DIR / "roles").glob("*/*/*")
        if path.is_file() and path.parent.name in ("tasks", "templates", "handlers")
        and "://" in path.read_text().replace("file:///etc/pki", "")
    ]
    assert offenders == []


def test_example_vault_is_encrypted() -> None:
    vault = ANSIBLE_DIR / "inventory" / "group_vars" / "gpu_hosts" / "vault.yml"
    assert vault.read_text().startswith("$ANSIBLE_VAULT;1.1;AES256")


def test_tensorflow_host_pins_the_tensorflow_of_the_images() -> None:
    """The host's virtual environment gets the TensorFlow the pip image is built with
    (requirements/gpu.txt), so a workload behaves the same on the host and in a container."""
    locked = (ANSIBLE_DIR.parent / "requirements" / "gpu.txt").read_text()
    [image_version] = re.findall(r"^tensorflow==(\S+)", locked, flags=re.MULTILINE)
    pinned = [Requirement(text) for text in _yaml("tensorflow_host", "defaults/main.yml")[
        "tensorflow_host_requirements"]]
    [tensorflow] = [requirement for requirement in pinned if requirement.name == "tensorflow"]
    assert str(tensorflow.specifier) == f"=={image_version}", (
        f"tensorflow_host pins {tensorflow}; the images lock tensorflow=={image_version}")
