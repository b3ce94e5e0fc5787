"""site.yml gathers only a subset of facts: every fact a role reads must be in it.

Why: gathering only what the roles use makes every run faster (issue 17.6),
but a role that starts reading a fact outside the subset would get an
undefined variable on real hosts. This test gathers the subset for real (on
this machine, through Ansible's setup module) and checks every
ansible_facts['...'] the site's roles read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

import yaml

from tests.ansible.playbook import ANSIBLE_DIR, BIN, site_role_order

# Facts that tasks set themselves (getent, package_facts, dpkg_package_facts), not fact gathering.
SET_BY_TASKS = {"getent_passwd", "packages", "dpkg_holds"}
FACT = re.compile(r"""ansible_facts\[['"]([a-z_0-9]+)['"]\]""")


def _site_play() -> dict[str, object]:
    play: dict[str, object] = yaml.safe_load((ANSIBLE_DIR / "site.yml").read_text())[0]
    return play


def _facts_read_by_site_roles() -> set[str]:
    roles = site_role_order()
    used: set[str] = set()
    for role in [*roles, "repo_trust"]:
        for path in (ANSIBLE_DIR / "roles" / role).rglob("*"):
            if path.is_file() and path.suffix in (".yml", ".j2"):
                used |= set(FACT.findall(path.read_text()))
    return used


def test_site_gathers_a_subset() -> None:
    subset = _site_play()["gather_subset"]
    assert isinstance(subset, list) and "!all" in subset


def test_every_fact_the_roles_read_is_gathered() -> None:
    subset = ",".join(_site_play()["gather_subset"])  # type: ignore[arg-type]
    result = subprocess.run(
        [str(BIN / "ansible"), "localhost", "-c", "local", "-m", "ansible.builtin.setup",
         "-a", f"gather_subset={subset}", "-o"],
        cwd=ANSIBLE_DIR, capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
             "ANSIBLE_INVENTORY": "localhost,", "ANSIBLE_LOCALHOST_WARNING": "0"},
    )
    gathered = json.loads(result.stdout.split("=>", 1)[1])["ansible_facts"]
    names = {name.removeprefix("ansible_") for name in gathered}
    used = _facts_read_by_site_roles()
    assert {"distribution", "os_family", "kernel"} <= used, "the role scan found nothing"
    missing = sorted(used - SET_BY_TASKS - names)
    assert missing == [], f"roles read facts site.yml's gather_subset leaves out: {missing}"
