"""gpu_passthrough keeps the role contract: every variable declared, defaulted, documented."""

from __future__ import annotations

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[2] / "ansible" / "roles" / "gpu_passthrough"


def _defaults() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    return data


def _spec() -> dict[str, dict[str, object]]:
    data = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    options: dict[str, dict[str, object]] = data["argument_specs"]["main"]["options"]
    return options


def test_every_default_is_declared_with_the_same_value() -> None:
    defaults, spec = _defaults(), _spec()
    assert set(defaults) == set(spec)
    for name, value in defaults.items():
        assert spec[name].get("default") == value, name


def test_every_variable_is_prefixed_and_in_the_readme() -> None:
    readme = (ROLE / "README.md").read_text()
    for name in _spec():
        assert name.startswith("gpu_passthrough_"), name
        assert f"`{name}`" in readme, f"{name} is not documented in README.md"


def test_every_os_family_has_its_settings_and_cmdline_tasks() -> None:
    for family in ("Debian", "RedHat"):
        assert (ROLE / "vars" / f"{family}.yml").is_file()
        assert (ROLE / "tasks" / f"cmdline-{family}.yml").is_file()
