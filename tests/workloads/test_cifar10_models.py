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


def lrn_reference(
    x: np.ndarray, r: int = 4, bias: float = 1.0, alpha: float = 0.001 / 9, beta: float = 0.75
) -> np.ndarray:
    """tf.nn.lrn's formula in float64 NumPy: x / (bias + alpha * sum of squares in window)^beta."""
    x = x.astype(np.float64)
    padded = np.pad(x**2, [(0, 0), (0, 0), (0, 0), (r, r)])
    window = sum(padded[..., k : k + x.shape[-1]] for k in range(2 * r + 1))
    return x / (bias + alpha * window) ** beta


def test_fused_and_keras_ops_lrn_agree() -> None:
    """The TensorFlow backend's fused kernel and the JAX/torch keras.ops path give one result."""
    from workloads.cifar10.models import lrn_ops, lrn_tensorflow

    x = np.random.default_rng(1).standard_normal((2, 5, 5, 16)).astype("float32") * 30
    fused = np.asarray(lrn_tensorflow(x, 4, 1.0, 0.001 / 9, 0.75))
    portable = np.asarray(lrn_ops(x, 4, 1.0, 0.001 / 9, 0.75))
    np.testing.assert_allclose(fused, portable, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(fused, lrn_reference(x), rtol=1e-5, atol=1e-6)
    layer = np.asarray(LocalResponseNorm()(x))  # the layer picks the fused kernel here
    np.testing.assert_array_equal(layer, fused)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_lrn_sums_squares_in_float32_under_mixed_precision(policy: str) -> None:
    """Activations of 300: nine squares sum to 8.1e5, past float16's 65504; no inf, no zeros."""
    import keras

    x = np.full((1, 2, 2, 16), 300.0, dtype="float32")
    try:
        keras.mixed_precision.set_dtype_policy(policy)
        layer = LocalResponseNorm()
        out = np.asarray(keras.ops.cast(layer(x), "float32"))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    assert layer.compute_dtype == policy.split("_")[1]
    np.testing.assert_allclose(out, lrn_reference(x), rtol=1e-2)
