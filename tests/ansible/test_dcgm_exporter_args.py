"""The DCGM exporter's settings are checked before the role runs.

Types and choices by meta/argument_specs.yml; the forms a type cannot say (an IP
address, an image pinned by registry and digest, a numeric user, tmpfs paths) by
tasks/validate.yml, the role's first task. Each bad value is refused with one
sentence naming the variable and the fix, before anything else runs.

The two decisions an attacker-controlled inventory value reaches, the address
filter (filter_plugins/ip_literal.py) and the image pattern (vars/main.yml), are
also tested in-process over whole families of inputs (Hypothesis), since one
Ansible run per example would take seconds each.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import string
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.ansible.filter_plugin import load_filters
from tests.ansible.playbook import ANSIBLE_DIR, PlaybookRun, run_local_play

ROLE = ANSIBLE_DIR / "roles" / "dcgm"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def _role_play(tmp_path: Path, **settings: object) -> PlaybookRun:
    play = [{"name": "dcgm with exporter settings", "hosts": "all", "gather_facts": False,
             "roles": [{"role": "dcgm", "dcgm_exporter": True, **settings}]}]
    return run_local_play(tmp_path, play)


def _flat(run: PlaybookRun) -> str:
    return " ".join(run.output.split())


def _refused_before_anything_ran(run: PlaybookRun) -> None:
    assert run.returncode != 0
    assert "Check that this role supports the host's OS family" not in run.output  # nothing ran
    assert "TASK [dcgm : Ask nvidia-smi" not in run.output


@pytest.mark.parametrize(("name", "value", "said"), [
    ("dcgm_exporter_network", "overlay", "must be one of: bridge, host, got: overlay"),
    ("dcgm_exporter_start_timeout", "soon", "dcgm_exporter_start_timeout"),
    ("dcgm_exporter_profiling", "maybe", "dcgm_exporter_profiling"),
])
def test_a_bad_exporter_setting_is_refused_before_any_task(tmp_path: Path, name: str, value: str,
                                                           said: str) -> None:
    run = _role_play(tmp_path, **{name: value})
    flat = _flat(run)
    assert said in flat, flat[-2000:]
    assert "Validating arguments against arg spec" in flat
    _refused_before_anything_ran(run)


def test_an_address_that_is_not_an_ip_is_refused_in_one_sentence(tmp_path: Path) -> None:
    run = _role_play(tmp_path, dcgm_exporter_address="gpu1.example.com")
    _refused_before_anything_ran(run)
    assert run.failed_task == "dcgm : Check the DCGM exporter's settings"
    message = next(line for line in run.output.splitlines() if "dcgm_exporter_address" in line)
    assert " ".join(message.split()).endswith(
        'dcgm_exporter_address "gpu1.example.com" is not an IP address. Fix: the host\'s address '
        "on the network Prometheus scrapes from (e.g. 10.0.0.5), 127.0.0.1 for the host alone, or "
        "0.0.0.0 for every address."), message


def test_every_bad_exporter_form_is_named_with_its_fix(tmp_path: Path) -> None:
    """One run, every form at once: the old tag-only default, a root user name, a tmpfs
    that smuggles mount options, a privileged port the exporter would bind itself."""
    run = _role_play(tmp_path,
                     dcgm_exporter_image="nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
                     dcgm_exporter_user="root", dcgm_exporter_tmpfs=["/tmp:exec,size=10g"],
                     dcgm_exporter_network="host", dcgm_exporter_port=443)
    _refused_before_anything_ran(run)
    flat = _flat(run)
    for said in (
        'dcgm_exporter_image "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04" is not '
        "pinned as REGISTRY/PATH:TAG@sha256:DIGEST",
        'dcgm_exporter_user "root" is not UID or UID:GID. Fix: a numeric uid and gid',
        'dcgm_exporter_tmpfs entry "/tmp:exec,size=10g" is not an absolute path.',
        "dcgm_exporter_port 443 cannot be used with dcgm_exporter_network: host (the exporter "
        "binds it itself, without CAP_NET_BIND_SERVICE). Fix: a port from 1024 to 65535",
    ):
        assert said in flat, flat[-3000:]
    assert "dcgm_exporter_address" not in flat  # the default, 127.0.0.1, is fine


# --- The two decisions, over families of inputs ----------------------------------------

@functools.cache
def _ip_version() -> Callable[[object], int]:
    found: Callable[[object], int] = load_filters("ip_literal.py", role="dcgm")["dcgm_ip_version"]
    return found


def dcgm_ip_version(value: object) -> int:
    return _ip_version()(value)


@functools.cache
def _image_pattern() -> re.Pattern[str]:
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    return re.compile(variables["__dcgm_exporter_image_pattern"])


@given(st.ip_addresses())
def test_every_ip_address_is_accepted_with_its_version(address: object) -> None:
    text = str(address)
    assert dcgm_ip_version(text) == ipaddress.ip_address(text).version


@given(st.ip_addresses(), st.sampled_from([
    ":9400 ", ":9400:9400 --privileged", " ", "\n", "/24", "%eth0", " -v /:/host", "]", ",",
]), st.booleans())
def test_an_address_with_anything_around_it_is_refused(address: object, extra: str,
                                                       before: bool) -> None:
    """What a docker argument or a listen string could be bent with: a port, a second
    option, a prefix length, a zone, whitespace, a bracket, a list separator. (A bare
    ":PORT" after an IPv6 address is itself an IPv6 address, so never sent as one.)"""
    text = extra + str(address) if before else str(address) + extra
    assert dcgm_ip_version(text) == 0


@given(st.text(alphabet=string.ascii_letters + string.digits + ".-_:/[]% \n", max_size=40))
def test_only_what_ipaddress_parses_is_an_address(text: str) -> None:
    try:
        expected = 0 if ("%" in text or text != text.strip()) else ipaddress.ip_address(
            text).version
    except ValueError:
        expected = 0
    assert dcgm_ip_version(text) == expected


def test_the_default_image_is_pinned_by_registry_tag_and_digest() -> None:
    default = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["dcgm_exporter_image"]
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())
    assert spec["argument_specs"]["main"]["options"]["dcgm_exporter_image"]["default"] == default
    assert _image_pattern().match(default)
    assert default.startswith("nvcr.io/nvidia/k8s/dcgm-exporter:4.5.2-4.8.1-ubuntu22.04@sha256:")


_registries = st.sampled_from(["nvcr.io", "registry.example.com:5000", "127.0.0.1:5000",
                               "localhost", "[::1]:5000"])
_paths = st.from_regex(r"[a-z0-9]+(/[a-z0-9._-]+){0,3}", fullmatch=True)
_tags = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}", fullmatch=True)
_digests = st.from_regex(r"[0-9a-f]{64}", fullmatch=True)


@given(_registries, _paths, _tags, _digests)
def test_an_image_with_registry_tag_and_digest_is_accepted(registry: str, path: str, tag: str,
                                                           digest: str) -> None:
    assert _image_pattern().match(f"{registry}/{path}:{tag}@sha256:{digest}")


@given(_registries, _paths, _tags, _digests, st.sampled_from([
    "no-digest", "no-tag", "no-registry", "short-digest", "upper-digest", "sha512",
    "trailing", "newline", "docker-hub-user",
]))
def test_an_image_without_any_part_is_refused(registry: str, path: str, tag: str, digest: str,
                                              damage: str) -> None:
    """Tag only (pulled by whatever the tag points to today), digest without a tag (no one
    can tell which release it is), no registry or a Docker Hub user name (pulled from
    Docker Hub), a digest cut short, in upper case, of another algorithm, or text or a
    newline after it."""
    image = {
        "no-digest": f"{registry}/{path}:{tag}",
        "no-tag": f"{registry}/{path}@sha256:{digest}",
        "no-registry": f"{path.split('/')[-1]}:{tag}@sha256:{digest}",
        "short-digest": f"{registry}/{path}:{tag}@sha256:{digest[:63]}",
        "upper-digest": f"{registry}/{path}:{tag}@sha256:{digest.upper()}A",
        "sha512": f"{registry}/{path}:{tag}@sha512:{digest}{digest}",
        "trailing": f"{registry}/{path}:{tag}@sha256:{digest} --privileged",
        "newline": f"{registry}/{path}:{tag}@sha256:{digest}\n",
        "docker-hub-user": f"nvidia/{path}:{tag}@sha256:{digest}",
    }[damage]
    assert not _image_pattern().match(image), image
