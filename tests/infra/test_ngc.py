"""NGC login: stored only in the users' 0600 Docker config, never in a log."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

# Where a leaked key would end up on the host: service logs, the journal,
# temporary files and Ansible's remote temp directory.
SEARCHED_DIRECTORIES = ["/var/log", "/tmp", "/var/tmp", "/root/.ansible"]


def _config_path(host: Any, user: str) -> str:
    return f"{host.user(user).home}/.docker/config.json"


def test_every_docker_config_is_private(host: Any, tfvars: dict[str, Any]) -> None:
    """Whatever the key setting, a Docker config that exists must not be readable by others."""
    for user in tfvars["ngc_users"]:
        config = host.file(_config_path(host, user))
        if config.exists:
            assert config.mode == 0o600, f"{config.path} is {oct(config.mode)}"
            assert config.user == user


def test_users_are_logged_in_to_ngc(host: Any, tfvars: dict[str, Any], ngc_api_key: str) -> None:
    expected = base64.b64encode(f"{tfvars['ngc_username']}:{ngc_api_key}".encode()).decode()
    for user in tfvars["ngc_users"]:
        config = json.loads(host.file(_config_path(host, user)).content_string)
        auth = config.get("auths", {}).get(tfvars["ngc_registry"], {}).get("auth")
        assert auth == expected, f"{user} is not logged in to {tfvars['ngc_registry']}"


def test_key_is_not_in_the_journal(host: Any, ngc_api_key: str) -> None:
    # The key is searched for here, on the test side: it is never put on the
    # host's command line, where the host's process list would show it.
    journal = host.run("journalctl --no-pager -o cat").stdout
    assert journal, "the journal is empty: nothing was checked"
    assert ngc_api_key not in journal


@pytest.mark.parametrize("directory", SEARCHED_DIRECTORIES)
def test_key_is_in_no_file_under(host: Any, ngc_api_key: str, directory: str) -> None:
    listing = host.run(f"find {directory} -xdev -type f -size -20M")
    leaked = [
        path for path in listing.stdout.splitlines()
        if ngc_api_key.encode() in host.file(path).content
    ]
    assert leaked == [], f"the NGC key is in {leaked}"
