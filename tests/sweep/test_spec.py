"""Spec validation: every mistake is one line naming the key and the fix, before any run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sweep.conftest import FAKE, REPO, sweep_cli, write_spec
from tests.workloads.conftest import assert_one_line_error
from workloads.errors import WorkloadError
from workloads.sweep.spec import load_spec


def spec_error(tmp_path: Path, text: str) -> str:
    path = write_spec(tmp_path / "spec.yaml", text)
    with pytest.raises(WorkloadError) as info:
        load_spec(path)
    message = info.value.one_line()
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("lerning_rate", "learning_rate"),
        # from `workloads style`'s own parser, so options no hand list would have
        ("style_layer_weight_ex", "style_layer_weight_exp"),
        ("preserve-color", "preserve_colors"),
        ("tolerance_windw", "tolerance_window"),
    ],
)
def test_unknown_parameter_names_the_closest_valid_ones_from_the_workload_parser(
    tmp_path: Path, typo: str, meant: str
) -> None:
    message = spec_error(tmp_path, f"workload: style\nvary: {{{typo}: [1, 3]}}\n")
    assert f"vary.{typo}: unknown parameter of style (did you mean {meant}" in message
    assert "see 'workloads style --help'" in message


def test_an_option_the_sweep_sets_itself_is_never_suggested(tmp_path: Path) -> None:
    message = spec_error(tmp_path, "workload: style\nvary: {outptu: [a.png]}\n")
    assert "unknown parameter" in message and "output" not in message.split(";")[0]


def test_unknown_parameter_in_defaults(tmp_path: Path) -> None:
    text = f"workload: {FAKE}\ndefaults: {{nope: 1}}\nvary: {{value: [1]}}\n"
    message = spec_error(tmp_path, text)
    assert f"defaults.nope: unknown parameter of {FAKE}" in message
    assert f"'python -m {FAKE} --help'" in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("workload: style\nvary: {learning_rate: []}\n", "vary.learning_rate has no values"),
        ("workload: style\nvary: {}\n", "'vary' names no parameter"),
        ("workload: style\n", "no 'vary' given"),
        ("workload: style\nvary: {learning_rate: 3}\n", "vary.learning_rate is not a list"),
        ("workload: style\nvary: {learning_rate: [1, 1.0]}\n", "repeats the value 1.0"),
    ],
)
def test_empty_or_malformed_values(tmp_path: Path, text: str, fragment: str) -> None:
    assert fragment in spec_error(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("workload: style\nvary: {learning_rate: [1, -3]}\n",
         "bad value -3 (must be > 0, got -3)"),
        ("workload: style\nvary: {pooling: [max, median]}\n",
         "'median' is not one of max, avg"),
        ("workload: style\nvary: {preserve_colors: [yes-ish]}\n", "is not true or false"),
        ("workload: style\nvary: {width: [64.5]}\n", "is not a whole number"),
        ("workload: style\nvary: {learning_rate: [null]}\n", "null is not a value"),
        ("workload: style\nvary: {learning_rate: {linspace: [1, 2]}}\n",
         "linspace needs [start, stop, count]"),
        ("workload: style\nvary: {learning_rate: {arange: [1, 2, 3]}}\n", "is not a value range"),
        ("workload: style\nvary: {learning_rate: {geomspace: [0, 2, 3]}}\n",
         "geomspace needs start and stop > 0"),
    ],
)
def test_values_are_checked_by_the_workloads_own_option_types(
    tmp_path: Path, text: str, fragment: str
) -> None:
    assert fragment in spec_error(tmp_path, text)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("workload: style\nvary: {learning_rate: [1, 3\n", "is not valid YAML"),
        ("workload: style\n  vary: x: 1\n", "line 2 column"),
        ("- just\n- a list\n", "is not a YAML mapping"),
        ("workload: style\nmode: spiral\nvary: {width: [64]}\n",
         "mode 'spiral' is not star or grid"),
        ("workload: painting\nvary: {width: [64]}\n", "unknown workload 'painting'"),
        ("workload: style\nvaryy: {width: [64]}\n", "unknown key 'varyy'"),
        ("vary: {width: [64]}\n", "no 'workload' given"),
        ("workload: style\noutput: a/b.png\nvary: {width: [64]}\n", "is not a file name"),
    ],
)
def test_bad_yaml_and_bad_structure(tmp_path: Path, text: str, fragment: str) -> None:
    assert fragment in spec_error(tmp_path, text)


def test_star_mode_needs_a_centre_for_options_without_default(tmp_path: Path) -> None:
    message = spec_error(tmp_path, "workload: style\nvary: {tolerance: [0.1, 0.01]}\n")
    assert "star mode needs a centre for 'tolerance'" in message
    assert "add 'tolerance: VALUE' under defaults" in message


def test_values_are_normalised_by_the_option_type(tmp_path: Path) -> None:
    path = write_spec(
        tmp_path / "spec.yaml",
        "workload: style\ndefaults: {learning_rate: 10, style_scales: 1}\n"
        "vary: {learning_rate: [1e-3, 3], preserve_colors: [false], style_scales: [[1, 2]]}\n",
    )
    spec = load_spec(path)
    # YAML reads 1e-3 as a string and 3 as an int: both become floats, as argparse makes them
    assert spec.vary["learning_rate"] == [0.001, 3.0]
    assert all(type(v) is float for v in spec.vary["learning_rate"])
    assert spec.defaults["style_scales"] == [1.0]  # nargs='+' option: always a list
    assert spec.vary["style_scales"] == [[1.0, 2.0]]
    assert spec.vary["preserve_colors"] == [False]


def test_the_cli_prints_one_line_and_exits_2(tmp_path: Path, sweep_env: dict[str, str]) -> None:
    path = write_spec(tmp_path / "spec.yaml", "workload: style\nvary: {lerning_rate: [1]}\n")
    result = sweep_cli([str(path), "--dir", str(tmp_path / "d")], sweep_env)
    assert result.returncode == 2
    assert_one_line_error(result, "sweep", "vary.lerning_rate: unknown parameter")
    assert not (tmp_path / "d" / "database.pk").exists()


def test_missing_spec_file(tmp_path: Path, sweep_env: dict[str, str]) -> None:
    result = sweep_cli([str(tmp_path / "nope.yaml")], sweep_env)
    assert result.returncode == 2
    assert_one_line_error(result, "sweep", "nope.yaml does not exist")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--devices", "zero"], "--devices 'zero' is not a list of GPU indexes"),
        (["--devices", "0"], "--devices 0 given but no GPU is visible"),
        (["--per-device", "0"], "must be > 0"),
        (["--workers-scan", "2,1"], "must rise strictly"),
        (["--workers-scan", "1,2"], "--workers-scan 2 needs 2 slots, the devices give 1"),
        (["--run-one", "99"], "no run '99' in this sweep"),
        (["--run-timeout", "0"], "must be > 0"),
        (["--scan-runs", "0"], "must be > 0"),
        (["--per-device", "2", "--workers-scan", "1,2", "--scan-runs", "1"],
         "1 run cannot keep 2 workers busy"),
    ],
)
def test_bad_command_line_options(
    tmp_path: Path, sweep_env: dict[str, str], args: list[str], fragment: str
) -> None:
    path = write_spec(tmp_path / "spec.yaml", f"workload: {FAKE}\nvary: {{value: [1, 2]}}\n")
    result = sweep_cli([str(path), "--dir", str(tmp_path / "d"), *args], sweep_env)
    assert result.returncode == 2
    line = next(ln for ln in result.stderr.splitlines() if "error:" in ln)
    assert fragment in line, result.stderr
    assert "Traceback" not in result.stderr


def test_dir_that_is_a_file_is_refused(tmp_path: Path, sweep_env: dict[str, str]) -> None:
    path = write_spec(tmp_path / "spec.yaml", f"workload: {FAKE}\nvary: {{value: [1]}}\n")
    (tmp_path / "taken").write_text("x")
    result = sweep_cli([str(path), "--dir", str(tmp_path / "taken")], sweep_env)
    assert_one_line_error(result, "sweep", "is a file")


def test_example_study_is_valid() -> None:
    spec = load_spec(REPO / "examples" / "style_study.yaml")
    counts = {name: len(values) for name, values in spec.vary.items()}
    assert counts == {
        "learning_rate": 13, "style_scales": 49, "content_weight_blend": 30,
        "style_weight": 50, "tv_weight": 50, "style_layer_weight_exp": 35,
    }
    assert spec.center["learning_rate"] == 10.0 and spec.center["preserve_colors"] is True


def test_cifar10_sweeps_take_its_options(tmp_path: Path) -> None:
    path = write_spec(tmp_path / "c.yaml", "workload: cifar10\nmode: grid\n"
                      "vary: {batch_size: [32, 64], model: [cnn, resnet50v2]}\n")
    spec = load_spec(path)
    assert spec.workload.output_name == "out.json"
    assert spec.vary == {"batch_size": [32, 64], "model": ["cnn", "resnet50v2"]}
    message = spec_error(tmp_path, "workload: cifar10\nvary: {model: [vgg]}\n")
    assert "'vgg' is not one of cnn, resnet50v2" in message
