"""Loss terms, Gram matrices, layer/blend weights, Adam and the convergence test, by hand."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from keras import ops

from workloads.style import losses
from workloads.style.config import StyleConfig, style_blend_weights, style_layer_weights
from workloads.style.optimize import advance, converged_at, initial_state


def t(values: list) -> object:
    return ops.convert_to_tensor(np.array(values, dtype=np.float32))


def value(x: object) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(x), dtype=np.float64)


def test_content_loss_blends_relu4_2_and_relu5_2() -> None:
    f42 = t([[[[1.0], [2.0]], [[3.0], [4.0]]]])  # (1, 2, 2, 1), target 0: MSE 7.5
    p42 = t(np.zeros((1, 2, 2, 1)).tolist())
    f52 = t([[[[2.0, 2.0]]]])  # (1, 1, 1, 2) against [1, 0]: MSE (1 + 4) / 2 = 2.5
    p52 = t([[[[1.0, 0.0]]]])
    assert value(losses.content_loss([f42, f52], [p42, p52], 0.2)) == pytest.approx(3.5)
    assert value(losses.content_loss([f42, f52], [p42, p52], 1.0)) == pytest.approx(7.5)
    assert value(losses.content_loss([f42, f52], [p42, p52], 0.0)) == pytest.approx(2.5)


def test_gram_is_ftf_over_h_w_c() -> None:
    features = t([[[[1.0, 2.0]], [[3.0, 4.0]]]])  # (1, 2, 1, 2): pixels [1, 2] and [3, 4]
    # FᵀF = [[10, 14], [14, 20]], divided by H·W·C = 4
    np.testing.assert_allclose(value(losses.gram(features)), [[2.5, 3.5], [3.5, 5.0]])


def test_gram_does_not_grow_with_the_image() -> None:
    rng = np.random.default_rng(0)
    small = rng.random((1, 4, 5, 3)).astype(np.float32)
    tiled = np.tile(small, (1, 3, 2, 1))  # same statistics, six times the pixels
    np.testing.assert_allclose(
        value(losses.gram(t(tiled.tolist()))), value(losses.gram(t(small.tolist()))), rtol=1e-5
    )


def test_style_loss_weights_layers_and_style_images() -> None:
    layer_a = t([[[[1.0, 2.0]], [[3.0, 4.0]]]])  # Gram [[2.5, 3.5], [3.5, 5]]
    layer_b = t([[[[2.0]]]])  # Gram [[4]]
    zero_targets = [t([[0.0, 0.0], [0.0, 0.0]]), t([[1.0]])]  # MSEs 13.9375 and 9
    exact_targets = [t([[2.5, 3.5], [3.5, 5.0]]), t([[4.0]])]  # MSEs 0 and 0
    one_style = losses.style_loss([layer_a, layer_b], [zero_targets], [0.25, 0.75], [1.0])
    assert value(one_style) == pytest.approx(0.25 * 13.9375 + 0.75 * 9)
    two_styles = losses.style_loss(
        [layer_a, layer_b], [zero_targets, exact_targets], [0.25, 0.75], [0.5, 0.5]
    )
    assert value(two_styles) == pytest.approx(0.5 * 10.234375)


def test_tv_loss_matches_neural_styles_normalisation() -> None:
    image = np.zeros((1, 2, 2, 3), dtype=np.float32)
    image[0, :, :, 0] = [[0.0, 1.0], [2.0, 3.0]]
    # Σdy² = 8 over (H−1)·W·3 = 6; Σdx² = 2 over H·(W−1)·3 = 6
    assert value(losses.tv_loss(t(image.tolist()))) == pytest.approx(8 / 6 + 2 / 6)


@pytest.mark.parametrize(
    ("exponent", "expected"),
    [
        (1.0, [0.2] * 5),
        (2.0, [1 / 31, 2 / 31, 4 / 31, 8 / 31, 16 / 31]),
        (0.5, [w / 1.9375 for w in (1, 0.5, 0.25, 0.125, 0.0625)]),
        (0.0, [1.0, 0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_style_layer_weights_grow_by_the_exponent(exponent: float, expected: list) -> None:
    assert style_layer_weights(exponent) == pytest.approx(expected)


def test_style_blend_weights_are_normalised_or_equal() -> None:
    config = StyleConfig(Path("c.png"), [Path("a.png"), Path("b.png")], Path("o.png"))
    assert style_blend_weights(config) == [0.5, 0.5]
    config.style_blend_weights = [3.0, 1.0]
    assert style_blend_weights(config) == [0.75, 0.25]


def test_adam_moves_by_the_learning_rate_first_then_by_the_bias_corrected_step() -> None:
    state = initial_state(np.zeros((1, 1, 1, 3), dtype=np.float32), keep_best=False)
    terms = t([0.0, 0.0, 0.0, 0.0])
    state, _ = advance(state, t([[[[1.0, -0.5, 0.0]]]]), terms, learning_rate=10.0)
    # First step: m̂/√v̂ = sign(g), so every pixel with a gradient moves by exactly lr.
    np.testing.assert_allclose(value(state[0]).ravel(), [-10.0, 10.0, 0.0], atol=1e-4)
    state, _ = advance(state, t([[[[-1.0, -0.5, 0.0]]]]), terms, learning_rate=10.0)
    # Pixel 0, gradient +1 then −1: m = −0.01, v = 0.001999, step = 10·(−0.01)/0.19.
    assert value(state[0]).ravel()[0] == pytest.approx(-10.0 + 10 / 19, abs=1e-4)
    assert value(state[3]) == 2.0


def test_best_tracking_keeps_the_lowest_loss_image() -> None:
    state = initial_state(np.full((1, 1, 1, 3), 5.0, dtype=np.float32), keep_best=True)
    grad = t([[[[1.0, 1.0, 1.0]]]])
    state, _ = advance(state, grad, t([3.0, 0, 0, 0]), learning_rate=1.0)  # loss of the 5s
    state, _ = advance(state, grad, t([7.0, 0, 0, 0]), learning_rate=1.0)  # worse: kept 5s
    np.testing.assert_allclose(value(state[4]).ravel(), [5.0, 5.0, 5.0])
    assert value(state[5]) == 3.0
    state, _ = advance(state, grad, t([1.0, 0, 0, 0]), learning_rate=1.0)  # better
    np.testing.assert_allclose(value(state[4]).ravel(), [3.0, 3.0, 3.0], atol=1e-4)


def test_converged_at_finds_the_first_small_relative_change() -> None:
    totals = [100.0, 50.0, 40.0, 39.9, 39.89]
    assert converged_at(totals, 0.01, window=1, start=0) == 3
    assert converged_at(totals, 0.01, window=2, start=0) == 4
    assert converged_at(totals, 0.01, window=1, start=4) == 4
    assert converged_at(totals, 1e-6, window=1, start=0) is None
    assert converged_at(totals, 0.5, window=10, start=0) is None  # history shorter than window
