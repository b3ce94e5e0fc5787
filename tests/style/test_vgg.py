"""The VGG19 extractor: where it stops, the avg-pooling swap, and where weights come from."""

from __future__ import annotations

from pathlib import Path

import h5py
import keras
import numpy as np
import pytest

from tests.style.conftest import WeightsFile
from workloads.errors import WorkloadError
from workloads.style import vgg
from workloads.style.memory import weight_bytes
from workloads.style.weights import WeightsSource, resolve


@pytest.fixture(scope="module")
def random_base() -> object:
    return vgg.load_vgg19(WeightsSource("random"), seed=0)


def kernel(model: object, name: str) -> np.ndarray:
    return np.asarray(keras.ops.convert_to_numpy(model.get_layer(name).weights[0].value))  # type: ignore[attr-defined]


def test_layers_used_stop_at_block5_conv2() -> None:
    names = [name for name, _, _ in vgg.layers_used()]
    assert names[-1] == "block5_conv2"
    assert "block5_conv3" not in names and "block5_pool" not in names
    assert sum(kind == "pool" for _, kind, _ in vgg.layers_used()) == 4


@pytest.mark.parametrize("pooling", ["max", "avg"])
def test_pooling_keeps_the_border_like_neural_style(random_base: object, pooling: str) -> None:
    """50x70 px: 'same' pooling gives ceil(side / 2) per pool, 'valid' would floor it.

    neural-style pools with SAME padding; with Keras' VALID the 4x pooled layers
    would be 3x4 here instead of 4x5, the last rows and columns never seen.
    """
    extractor = vgg.build_extractor(random_base, pooling)
    shapes = [tuple(o.shape)[1:3] for o in extractor(np.ones((1, 50, 70, 3), dtype="float32"))]
    assert shapes == [(7, 9), (4, 5), (50, 70), (25, 35), (13, 18), (7, 9), (4, 5)]
    pools = [layer for layer in extractor.layers if "pool" in layer.name]
    assert len(pools) == 4 and {p.padding for p in pools} == {"same"}


def test_extractor_outputs_content_then_style_layers(random_base: object) -> None:
    extractor = vgg.build_extractor(random_base, "max")
    outputs = extractor(np.zeros((1, 48, 64, 3), dtype="float32"))
    shapes = [tuple(o.shape) for o in outputs]
    assert shapes == [
        (1, 6, 8, 512),  # block4_conv2
        (1, 3, 4, 512),  # block5_conv2
        (1, 48, 64, 64),  # block1_conv1
        (1, 24, 32, 128),
        (1, 12, 16, 256),
        (1, 6, 8, 512),
        (1, 3, 4, 512),  # block5_conv1
    ]
    assert extractor.count_params() * 4 == weight_bytes()  # nothing beyond block5_conv2
    assert not extractor.trainable


def test_avg_pooling_replaces_every_max_pooling_and_shares_weights(random_base: object) -> None:
    max_net = vgg.build_extractor(random_base, "max")
    avg_net = vgg.build_extractor(random_base, "avg")
    kinds = [type(layer).__name__ for layer in avg_net.layers]
    assert "MaxPooling2D" not in kinds
    assert kinds.count("AveragePooling2D") == 4
    assert avg_net.get_layer("block3_conv1") is random_base.get_layer("block3_conv1")  # type: ignore[attr-defined]

    image = np.random.default_rng(1).normal(0, 50, (1, 32, 32, 3)).astype("float32")
    max_out = [keras.ops.convert_to_numpy(o) for o in max_net(image)]
    avg_out = [keras.ops.convert_to_numpy(o) for o in avg_net(image)]
    np.testing.assert_allclose(avg_out[2], max_out[2])  # block1_conv1: before any pooling
    assert not np.allclose(avg_out[3], max_out[3])  # block2_conv1: after the first pooling
    # block2_conv1 of the avg net equals the conv applied to a hand-made 2x2 average.
    layer = random_base.get_layer  # type: ignore[attr-defined]
    relu1_2 = layer("block1_conv2")(layer("block1_conv1")(image))
    pooled = keras.ops.convert_to_numpy(relu1_2).reshape(1, 16, 2, 16, 2, 64).mean(axis=(2, 4))
    expected = layer("block2_conv1")(pooled)
    np.testing.assert_allclose(
        avg_out[3], keras.ops.convert_to_numpy(expected), rtol=1e-4, atol=1e-3
    )


def test_random_weights_are_seeded_he_scaled(random_base: object) -> None:
    again = vgg.load_vgg19(WeightsSource("random"), seed=0)
    other = vgg.load_vgg19(WeightsSource("random"), seed=1)
    np.testing.assert_array_equal(
        kernel(random_base, "block3_conv1"), kernel(again, "block3_conv1")
    )
    assert not np.allclose(kernel(random_base, "block3_conv1"), kernel(other, "block3_conv1"))
    std = kernel(random_base, "block3_conv1").std()
    assert std == pytest.approx(vgg.RANDOM_GAIN * np.sqrt(2 / (9 * 128)), rel=0.02)


def test_weights_file_in_keras2_layout_loads(vgg_weights_file: WeightsFile) -> None:
    source = resolve(str(vgg_weights_file.path))
    assert source.kind == "file"
    model = vgg.load_vgg19(source, seed=0)
    for name in ("block1_conv1", "block4_conv2", "block5_conv4"):
        np.testing.assert_array_equal(kernel(model, name), vgg_weights_file.arrays[name][0])


def test_hdf5_that_is_not_vgg19_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "other.h5"
    with h5py.File(path, "w") as f:
        f.attrs["layer_names"] = [b"dense"]
        f.create_group("dense").attrs["weight_names"] = [b"dense/kernel:0"]
        f["dense"].create_dataset("dense/kernel:0", data=np.zeros((2, 2)))
    with pytest.raises(WorkloadError) as info:
        vgg.load_vgg19(resolve(str(path)), seed=0)
    message = info.value.one_line()
    assert path.name in message and "is not Keras VGG19 no-top weights" in message
    assert "\n" not in message


def test_bfloat16_extractor_computes_in_bfloat16_and_hands_the_losses_float32() -> None:
    """--precision bfloat16: convolutions and poolings in bfloat16, float32 weights kept,
    every output float32 (Gram matrices and losses must not sum in bfloat16), and the
    features close to the float32 network's with the same weights."""
    fp32 = vgg.build_extractor(vgg.load_vgg19(WeightsSource("random"), seed=0), "max")
    bf16 = vgg.build_extractor(vgg.load_vgg19(WeightsSource("random"), 0, "bfloat16"), "max")
    convs = [layer for layer in bf16.layers if "conv" in layer.name and layer.weights]
    pools = [layer for layer in bf16.layers if "pool" in layer.name]
    assert convs and {layer.compute_dtype for layer in convs + pools} == {"bfloat16"}
    assert {w.dtype for layer in convs for w in layer.weights} == {"float32"}
    assert keras.config.dtype_policy().name == "float32"  # the global policy was restored
    image = np.random.default_rng(0).uniform(-100, 100, (1, 32, 48, 3)).astype("float32")
    for ours, reference in zip(bf16(image), fp32(image), strict=True):
        assert ours.dtype == "float32"
        got, want = keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(reference)
        assert np.linalg.norm(got - want) <= 0.05 * np.linalg.norm(want)


def test_float32_extractor_has_no_cast_layers(random_base: object) -> None:
    extractor = vgg.build_extractor(random_base, "max")
    assert not [layer for layer in extractor.layers if layer.name.endswith("_f32")]
    assert {layer.compute_dtype for layer in extractor.layers if layer.weights} == {"float32"}
