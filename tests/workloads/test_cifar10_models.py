"""Every benchmark model builds and trains a few steps on tiny shapes; LRN matches TF's."""

from __future__ import annotations

import numpy as np
import pytest

from workloads.cifar10.models import MODELS, LocalResponseNorm, tutorial_cnn


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_trains_a_few_steps(name: str) -> None:
    import keras

    size = 24 if name == "cnn" else 32
    model = MODELS[name].build(size)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, size, size, 3)).astype("float32")
    y = rng.integers(0, 10, 4)
    history = model.fit(x, y, batch_size=2, epochs=1, steps_per_epoch=2, verbose=0)
    assert np.isfinite(history.history["loss"][-1])
    assert model.output_shape == (None, 10)
    assert model.outputs[0].dtype == "float32"


def test_tutorial_cnn_layout() -> None:
    model = tutorial_cnn()
    assert model.input_shape == (None, 24, 24, 3)
    convs = [layer for layer in model.layers if layer.name.startswith("conv")]
    assert [(c.filters, c.kernel_size) for c in convs] == [(64, (5, 5)), (64, (5, 5))]
    assert [model.get_layer(n).units for n in ("local3", "local4", "logits")] == [384, 192, 10]
    order = [layer.name for layer in model.layers]
    assert order.index("pool1") < order.index("norm1") < order.index("conv2")
    assert order.index("norm2") < order.index("pool2")


def test_local_response_norm_matches_tensorflow() -> None:
    import tensorflow as tf

    x = np.random.default_rng(1).standard_normal((2, 5, 5, 16)).astype("float32") * 3
    ours = np.asarray(LocalResponseNorm(depth_radius=4, bias=1.0, alpha=0.001 / 9, beta=0.75)(x))
    reference = tf.nn.local_response_normalization(
        x, depth_radius=4, bias=1.0, alpha=0.001 / 9, beta=0.75
    ).numpy()
    np.testing.assert_allclose(ours, reference, rtol=1e-5, atol=1e-6)
