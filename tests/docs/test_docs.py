"""Checked docs: every documented command parses, every link resolves, every variable exists.

Reads README.md, docs/*.md and the component READMEs (ansible/README.md,
ansible/roles/*/README.md, scripts/slurm/README.md, images/README.md, tests/README.md) with
:mod:`tests.docs.doccheck`, whose docstring lists the command forms it reads: fenced and
indented code blocks and inline code spans; ``\\`` continuations and ``#`` comments; ``NAME=value``
prefixes (``KERAS_BACKEND=jax workloads …``), ``sudo``/``srun``/``apptainer exec`` wrappers,
``python -m workloads``, ``…/bin/workloads``, ``docker run … IMAGE [workloads] …`` and the inner
command of ``workloads run IMAGE -- …`` and ``workloads monitor … -- workloads …``;
placeholders such as ``~/my-inventory``, ``<run>`` and ``SPEC.yaml`` as the values they stand for.

Nothing is run: ``workloads`` lines go through ``workloads.cli.build_parser()`` (and ``run``'s
own second pass), ``ansible-playbook`` lines through the parser ``ansible.cli.playbook.PlaybookCLI``
builds. The planted cases at the end run the same checks over small synthetic pages, so the
suite itself shows that a wrong option, an unknown subcommand, a missing playbook, a broken link
or anchor and an unknown role variable each fail, naming the file and line; and that each other
form a guide may write a command or a link in (a ``$`` prompt, ``$(…)``, ``bash -c``, ``xargs``,
an Ansible task, a reference-style or HTML link, …) is read, passing when right and failing when
wrong.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.docs import doccheck, reference_table
from tests.docs.doccheck import ROOT

PAGES = doccheck.guide_paths(ROOT)


def read(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def test_the_pages_are_found() -> None:
    """The globs still match the pages this test promises to read."""
    for rel in ("README.md", "docs/acceptance.md", "docs/provisioning.md", "docs/workloads.md",
                "docs/sweeps-and-slurm.md", "docs/security.md", "docs/development.md",
                "docs/gpu-passthrough.md", "docs/benchmarks.md", "ansible/README.md",
                "ansible/roles/nvidia_driver/README.md", "scripts/slurm/README.md",
                "images/README.md", "tests/README.md"):
        assert rel in PAGES


@pytest.mark.parametrize("rel", PAGES)
def test_documented_commands_parse(rel: str) -> None:
    """Every workloads and ansible-playbook line of the page through the real parsers."""
    _, problems = doccheck.check_commands(rel, read(rel), ROOT)
    assert not problems, "\n" + doccheck.report(problems)


def test_the_commands_are_read() -> None:
    """A reader that finds nothing would pass every page: the docs hold dozens of each."""
    whole = [c for rel in PAGES for c in doccheck.commands_in(rel, read(rel))[0] if c.whole]
    assert sum(c.program == "workloads" for c in whole) >= 60
    assert sum(c.program == "ansible-playbook" for c in whole) >= 12
    readme = {c.argv[0] for c in doccheck.commands_in("README.md", read("README.md"))[0]
              if c.program == "workloads" and c.argv}
    assert {"cifar10", "style", "sweep", "run"} <= readme


@pytest.mark.parametrize("rel", PAGES)
def test_relative_links_resolve(rel: str) -> None:
    _, problems = doccheck.check_links(rel, read(rel), ROOT)
    assert not problems, "\n" + doccheck.report(problems)


@pytest.mark.parametrize("rel", PAGES)
def test_yaml_blocks_parse(rel: str) -> None:
    _, problems = doccheck.check_yaml(rel, read(rel))
    assert not problems, "\n" + doccheck.report(problems)


def test_the_yaml_blocks_are_read() -> None:
    assert sum(doccheck.check_yaml(rel, read(rel))[0] for rel in PAGES) >= 10


@pytest.mark.parametrize("rel", [p for p in PAGES if p not in doccheck.NOT_VARIABLE_DOCS])
def test_role_variables_exist(rel: str) -> None:
    """Every role-prefixed name a guide uses is in the role's meta/argument_specs.yml (or is a
    play variable, module, tag or fact that ansible/ defines)."""
    _, problems = doccheck.check_variables(rel, read(rel), doccheck.ansible_names(ROOT))
    assert not problems, "\n" + doccheck.report(problems)


def test_front_page_opens_with_the_two_commands() -> None:
    """The README's first lines are the two commands, and the page stays short."""
    lines = read("README.md").split("\n")
    assert lines[0] == "```sh" and lines[3] == "```"
    assert lines[1].startswith("./scripts/demo.sh    # .venv + the CIFAR-10 benchmark on the CPU")
    assert lines[2].startswith("./scripts/test.sh    # the whole test suite, exactly as CI runs it")
    assert len(lines) <= 250


def test_every_guide_opens_with_what_the_reader_will_have() -> None:
    """A guide's first paragraph after its title says what the reader has at its end."""
    for guide in sorted((ROOT / "docs").glob("*.md")):
        paragraphs = [p for p in guide.read_text(encoding="utf-8").split("\n\n") if p.strip()]
        assert paragraphs[0].startswith("# "), guide.name
        assert paragraphs[1].startswith("**At the end of this"), (
            f"docs/{guide.name} does not open with what the reader will have at its end")


def test_every_guide_is_linked_from_the_front_page() -> None:
    readme = read("README.md")
    for guide in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{guide.name}" in readme, f"README.md does not link docs/{guide.name}"


# What a run log looks like: a test-suite command or result, a run of the whole suite, CI.
RUN_LOG = re.compile(r"\bpytest\b|\b\d+ (passed|failed)\b|\bsuite's run\b|\.ci/run|\bCI\b")
# Words of the project's own work history, which user pages do not speak.
HISTORY = re.compile(r"\bsession\b|\bissue #?\d+|#\d{2,}\b|\bwas (added|changed|fixed)\b",
                     re.IGNORECASE)


def test_benchmarks_is_a_user_page() -> None:
    """docs/benchmarks.md holds the figures a user compares with, not the test suite's runs:
    those, and the suite's time, are docs/development.md's."""
    found = [f"docs/benchmarks.md:{n}: {line}"
             for n, line in enumerate(read("docs/benchmarks.md").split("\n"), 1)
             if RUN_LOG.search(line)]
    assert not found, "a test-suite run in a user page (move it to docs/development.md):\n" + \
        "\n".join(found)


def test_user_pages_speak_no_work_history() -> None:
    user_pages = ["README.md", *(p for p in PAGES if p.startswith("docs/"))]
    found = [f"{rel}:{n}: {line}" for rel in user_pages
             for n, line in enumerate(read(rel).split("\n"), 1) if HISTORY.search(line)]
    assert not found, "\n".join(found)


def test_the_per_card_tables_are_the_reference_data() -> None:
    """docs/benchmarks.md's per-card limits and thresholds are reference.yaml's, as the battery
    reads them; after changing the data, paste `python tests/docs/reference_table.py`."""
    assert reference_table.tables() in read("docs/benchmarks.md"), (
        "docs/benchmarks.md's per-card tables differ from workloads/hardware/reference.yaml: "
        "paste the output of `python tests/docs/reference_table.py` in their place")


# ---------------------------------------------------------------------------- planted errors

@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A synthetic repository root: one playbook, one guide to link to."""
    (tmp_path / "ansible").mkdir()
    (tmp_path / "ansible" / "site.yml").write_text("- hosts: all\n  tags: [nvidia_driver]\n",
                                                   encoding="utf-8")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# A guide\n\n## The `errors` check: XIDs\n",
                                                encoding="utf-8")
    return tmp_path


def problems_of(page: str, root: Path, rel: str = "docs/page.md") -> list[str]:
    (root / rel).write_text(page, encoding="utf-8")
    found = doccheck.check_commands(rel, page, root)[1] + doccheck.check_links(rel, page, root)[1]
    found += doccheck.check_variables(rel, page, doccheck.ansible_names(ROOT))[1]
    found += doccheck.check_yaml(rel, page)[1]
    return [str(p) for p in found]


GOOD = """\
# Good

```sh
workloads accept --quick                 # a comment with --no-such-option in it
KERAS_BACKEND=jax workloads cifar10 --model cnn --data synthetic \\
    --epochs 2 --batch-size 64
.venv/bin/python -m workloads style --weights random --width 64 --output out.png
sudo .venv/bin/workloads health --since-boot
docker run --rm --gpus all tfhost/workloads:ngc workloads check --require-gpu
docker run --rm --gpus all tfhost/workloads:ngc check --require-gpu
workloads run --gpus 0,1 tfhost/workloads:ngc -- cifar10 --model resnet50v2
workloads run tfhost/workloads:pip --gpus 0,1 --timeout 3600 -- style --width 512
workloads monitor --csv gpu.csv -- workloads cifar10
workloads report --fleet results/acceptance/<run> --baselines results/acceptance/baselines
workloads COMMAND --help
cd ansible && ansible-playbook -i ~/my-inventory site.yml --ask-vault-pass --check
ansible-playbook -i ~/my-inventory site.yml --limit gpu7,localhost -e nvidia_driver_branch=590
```

```console
$ ansible-playbook -i inventory site.yml --tags nvidia_driver,always --skip-tags never
```

Prose may name `workloads report --fleet` or `workloads sweep` without every argument; see
[the guide](guide.md#the-errors-check-xids), [this page](#good) and `acceptance_enforce: true`.
"""


def test_the_good_forms_pass(site: Path) -> None:
    assert problems_of(GOOD, site) == []
    commands, _ = doccheck.commands_in("docs/page.md", GOOD)
    whole = [c for c in commands if c.whole]
    assert len(whole) == 14  # each line above, the docker forms included, is read


# (page, what the one problem must say): each plants one error on line 3.
PLANTED = {
    "wrong option": ("```sh\nworkloads accept --quick\nworkloads accept --quik-typo\n```\n",
                     "unrecognized arguments: --quik-typo"),
    "abbreviated option": ("```sh\nworkloads check\nworkloads sweep x.yaml --per-dev 2\n```\n",
                           "unrecognized arguments: --per-dev"),
    "unknown subcommand": ("```sh\nworkloads check\nworkloads acept --quick\n```\n",
                           "invalid choice: 'acept'"),
    "wrong option after an env prefix and a continuation": (
        "```sh\nworkloads check\nKERAS_BACKEND=jax workloads cifar10 --model cnn \\\n"
        "    --ephocs 2\n```\n",
        "unrecognized arguments: --ephocs 2"),
    "wrong option in the image's command": (
        "```sh\nworkloads check\nworkloads run tfhost/workloads:ngc -- cifar10 --modle cnn\n```\n",
        "unrecognized arguments: --modle cnn"),
    "wrong option through docker run": (
        "```sh\nworkloads check\ndocker run --rm tfhost/workloads:cpu workloads check --gpu\n```\n",
        "unrecognized arguments: --gpu"),
    "wrong option through python -m": (
        "```sh\nworkloads check\npython3 -m workloads sweep x.yaml --devcies 0\n```\n",
        "unrecognized arguments: --devcies 0"),
    "wrong ansible-playbook option": (
        "```sh\nworkloads check\nansible-playbook -i inventory site.yml --chekc\n```\n",
        "unrecognized arguments: --chekc"),
    "missing playbook": ("```sh\nworkloads check\nansible-playbook -i inventory sites.yml\n```\n",
                         "playbook sites.yml is not in ansible/"),
    "broken link": ("# Page\n\nok\nSee [the guide](guidee.md).\n", "guidee.md does not exist"),
    "broken anchor": ("# Page\n\nok\nSee [XIDs](guide.md#the-errors-check-xid).\n",
                      "no heading #the-errors-check-xid in guide.md"),
    "broken anchor in the page itself": ("# Page\n\nok\nSee [above](#pages).\n",
                                         "no heading #pages in docs/page.md"),
    "a module set as if it were a variable": (
        "# Page\n\nok\n```yaml\nrepo_trust_fetch: true\n```\n",
        "repo_trust_fetch is set here, but it is a module of ansible/"),
    "unknown role variable": ("# Page\n\nok\nSet `nvidia_driver_brnch: 590`.\n",
                              "nvidia_driver_brnch is no option of role nvidia_driver"),
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_a_planted_error_fails_naming_file_and_line(site: Path, case: str) -> None:
    page, expected = PLANTED[case]
    line = 3 if not page.startswith("#") else 4 if "```yaml" not in page else 5
    found = problems_of(page, site)
    assert len(found) == 1, found
    assert found[0].startswith(f"docs/page.md:{line}: "), found
    assert expected in found[0], found


SUBCOMMANDS = doccheck.workloads_subcommands()


@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_every_subcommand_refuses_a_planted_option(site: Path, subcommand: str) -> None:
    """The family: each subcommand's --help passes, the same line with a made-up option fails."""
    assert problems_of(f"```sh\nworkloads {subcommand} --help\n```\n", site) == []
    found = problems_of(f"```sh\nworkloads {subcommand} --zz-planted-{subcommand}\n```\n", site)
    assert len(found) == 1 and found[0].startswith("docs/page.md:2: "), found
    assert f"--zz-planted-{subcommand}" in found[0] or "required" in found[0], found


@pytest.mark.parametrize(("heading", "anchor"), [
    ("The GPUs: module flavour per generation, HGX/DGX boards",
     "the-gpus-module-flavour-per-generation-hgxdgx-boards"),
    ("`workloads check` — is this host ready?", "workloads-check--is-this-host-ready"),
    ("Locked, with hashes: `requirements/`", "locked-with-hashes-requirements"),
    ("The fleet report for 1,000 hosts × 8 GPUs", "the-fleet-report-for-1000-hosts--8-gpus"),
    ("Slow set-ups start at collection (tests/support/background.py)",
     "slow-set-ups-start-at-collection-testssupportbackgroundpy"),
    ("A [linked](x.md) `gpu_validate_dcgm` tag", "a-linked-gpu_validate_dcgm-tag"),
])
def test_github_slugs(heading: str, anchor: str) -> None:
    assert doccheck.slug(heading) == anchor


def test_repeated_headings_are_numbered() -> None:
    assert {"usage", "usage-1", "usage-2"} <= doccheck.anchors("# Usage\n## Usage\n### Usage\n")


# The next case of each family: command lines written in the other forms a guide may use,
# links written in the other Markdown (and HTML) forms. Each form, written right, passes ...
GOOD_FORMS = """\
# Forms

```console
$ workloads accept --quick
% ansible-playbook -i inventory site.yml --check
```

```sh
(cd ansible && ansible-playbook -i inventory site.yml --check)
if workloads check --require-gpu; then echo ready; fi
for host in a b; do workloads accept --quick; done
! workloads check --require-gpu
{ workloads check; } 2>&1 | tee check.log
run=$(workloads accept --quick --json)
echo `workloads check`
bash -c 'workloads accept --quick'
ssh gpu1 'workloads health --since-boot'
echo a | xargs -n1 workloads check
nice -n 10 numactl --cpunodebind=0 workloads cifar10 --model cnn
uv run workloads style --width 64
python -u -X dev -m workloads check
docker exec -it bench workloads check
podman run --rm tfhost/workloads:cpu check
```

```ini
ExecStart=/opt/tfhost/bin/workloads health --since-boot
```

```yaml
- name: Check the host
  ansible.builtin.command: workloads check --require-gpu
```

> ```sh
> workloads accept --quick
> ```

See [the guide][g], [XIDs][], <a href="guide.md#the-errors-check-xids">XIDs</a>,
<img src="guide.md" alt="x"> and [titled](guide.md 'A title') [twice](guide.md (Another)).

[g]: guide.md "The guide"
[xids]: guide.md#the-errors-check-xids 'XIDs'
"""


def test_the_other_forms_are_read_and_pass(site: Path) -> None:
    assert problems_of(GOOD_FORMS, site) == []
    commands, _ = doccheck.commands_in("docs/page.md", GOOD_FORMS)
    lines = {c.line for c in commands if c.whole}
    assert lines == {4, 5, *range(9, 24), 27, 32, 36}, sorted(lines)
    links, _ = doccheck.check_links("docs/page.md", GOOD_FORMS, site)
    assert links == 6  # the HTML link and image, the two titled links, the two definitions


# ... and the same form with one error in it fails, naming the line: (page, line, message).
PLANTED_FORMS = {
    "$ prompt": ("```console\n$ workloads accept --quik\n```\n", 2, "--quik"),
    "$ prompt, ansible-playbook": ("```console\n$ ansible-playbook site.yml --chekc\n```\n", 2,
                                   "--chekc"),
    "subshell": ("```sh\n(cd x && workloads accept --quik)\n```\n", 2, "--quik"),
    "if ... then": ("```sh\nif workloads acept; then :; fi\n```\n", 2, "'acept'"),
    "for ... do": ("```sh\nfor h in a; do workloads accept --quik; done\n```\n", 2, "--quik"),
    "$( )": ("```sh\nrun=$(workloads accept --quik)\n```\n", 2, "--quik"),
    "backquotes": ("```sh\necho `workloads accept --quik`\n```\n", 2, "--quik"),
    "bash -c": ("```sh\nbash -c 'workloads accept --quik'\n```\n", 2, "--quik"),
    "ssh HOST": ("```sh\nssh gpu1 workloads health --since-boto\n```\n", 2, "--since-boto"),
    "xargs": ("```sh\necho a | xargs -n1 workloads accept --quik\n```\n", 2, "--quik"),
    "nice, numactl": ("```sh\nnice numactl -N 0 workloads accept --quik\n```\n", 2, "--quik"),
    "uv run": ("```sh\nuv run workloads accept --quik\n```\n", 2, "--quik"),
    "python -u -m": ("```sh\npython -u -m workloads accept --quik\n```\n", 2, "--quik"),
    "docker exec": ("```sh\ndocker exec c workloads accept --quik\n```\n", 2, "--quik"),
    "podman run": ("```sh\npodman run tfhost/workloads:cpu accept --quik\n```\n", 2, "--quik"),
    "ExecStart=": ("```ini\nExecStart=/opt/v/bin/workloads health --since-boto\n```\n", 2,
                   "--since-boto"),
    "an Ansible task's command": (
        "```yaml\n- name: x\n  ansible.builtin.command: workloads check --gpu\n```\n", 3, "--gpu"),
    "a fence in a blockquote": ("> ```sh\n> workloads accept --quik\n> ```\n", 2, "--quik"),
    "reference link": ("# P\n\nSee [x][r].\n\n[r]: guidee.md\n", 5, "guidee.md does not exist"),
    "a tag nothing carries": ("```sh\nansible-playbook site.yml --tags nvidia_drivr\n```\n", 2,
                              "--tags nvidia_drivr: no play, role or task of ansible/ carries"),
    "a skipped tag nothing carries": ("```sh\nansible-playbook site.yml --skip-tags nvidia\n```\n",
                                      2, "--skip-tags nvidia: no play"),
    "a playbook that is no YAML file": ("```sh\nansible-playbook -i inventory guide.md\n```\n", 2,
                                        "playbook guide.md is not in ansible/"),
    "a YAML block that does not parse": (
        "```yaml\nall:\n  hosts:\n    gpu1: {ansible_host: 10.0.0.1\n```\n", 5,
        "the YAML block does not parse"),
    "undefined reference label": ("# P\n\nSee [x][nosuch].\n", 3, "no [nosuch]: definition"),
    "HTML a href": ('# P\n\n<a href="guidee.md">x</a>\n', 3, "guidee.md does not exist"),
    "HTML img src": ('# P\n\n<img src="shot.png">\n', 3, "shot.png does not exist"),
    "link with a quoted title": ("# P\n\n[x](guidee.md 'T')\n", 3, "guidee.md does not exist"),
    "link with a title in parentheses": ("# P\n\n[x](guidee.md (T))\n", 3,
                                         "guidee.md does not exist"),
    "anchor differing in case": ("# P\n\n[x](guide.md#The-errors-check-xids)\n", 3,
                                 "did you mean #the-errors-check-xids?"),
    "anchor keeping punctuation": ("# P\n\n[x](guide.md#the-errors-check:-xids)\n", 3,
                                   "did you mean #the-errors-check-xids?"),
}


@pytest.mark.parametrize("case", sorted(PLANTED_FORMS))
def test_a_planted_error_in_another_form_fails(site: Path, case: str) -> None:
    page, line, expected = PLANTED_FORMS[case]
    found = problems_of(page, site)
    assert len(found) == 1, found
    assert found[0].startswith(f"docs/page.md:{line}: "), found
    assert expected in found[0], found


def test_a_play_on_a_vaulted_group_without_its_secret_fails(site: Path) -> None:
    """The guides' inventory keeps the NGC key in gpu_hosts' vault: a documented play on that
    group without the vault's secret stops at "no vault secrets found" before its first task."""
    vault = site / "ansible" / "inventory" / "group_vars" / "gpu_hosts" / "vault.yml"
    vault.parent.mkdir(parents=True)
    vault.write_text("$ANSIBLE_VAULT;1.1;AES256\n6162\n", encoding="utf-8")
    (site / "ansible" / "accept.yml").write_text(
        "- hosts: localhost\n- hosts: \"{{ acceptance_hosts | default('gpu_hosts') }}\"\n",
        encoding="utf-8")
    (site / "ansible" / "other.yml").write_text("- hosts: kvm_hosts\n", encoding="utf-8")
    good = ("```sh\n"
            "ansible-playbook -i ~/my-inventory accept.yml --ask-vault-pass\n"
            "ansible-playbook -i inventory accept.yml --vault-password-file vault.pass\n"
            "ANSIBLE_VAULT_PASSWORD_FILE=~/.vault-pass ansible-playbook accept.yml\n"
            "ansible-playbook -i ~/my-inventory other.yml\n"
            "ansible-playbook -i gpu7, accept.yml\n"
            "```\n"
            "Prose may name `ansible-playbook accept.yml`.\n")
    assert problems_of(good, site) == []
    for line in ("ansible-playbook -i ~/my-inventory accept.yml -e acceptance_enforce=true",
                 "ansible-playbook accept.yml --limit gpu7,localhost"):
        found = problems_of(f"```sh\n{line}\n```\n", site)
        assert len(found) == 1 and found[0].startswith("docs/page.md:2: "), found
        assert "accept.yml runs on gpu_hosts, whose group_vars hold a vault: add " \
               "--ask-vault-pass" in found[0], found
