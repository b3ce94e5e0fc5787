"""The three loss terms of Gatys et al., written once in ``keras.ops``.

``keras.ops`` runs unchanged on the TensorFlow, JAX and PyTorch backends, so the
loss is defined in one place and only the gradient step (see ``optimize``) is
backend-specific. Normalisations follow neural-style, whose parameter values the
seed study swept: every term is a mean, so the weights keep their meaning across
image sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keras import ops


def mean_squared(a: Any, b: Any) -> Any:
    return ops.mean(ops.square(a - b))


def content_loss(features: Sequence[Any], targets: Sequence[Any], blend: float) -> Any:
    """``blend``·MSE at relu4_2 + (1 − blend)·MSE at relu5_2 (features in that order)."""
    return blend * mean_squared(features[0], targets[0]) + (1.0 - blend) * mean_squared(
        features[1], targets[1]
    )


def gram(features: Any) -> Any:
    """FᵀF / (H·W·C) of a (1, H, W, C) activation: channel co-occurrence, size-free."""
    _, height, width, channels = features.shape
    flat = ops.reshape(features, (-1, channels))
    return ops.matmul(ops.transpose(flat), flat) / float(height * width * channels)


def style_loss(
    features: Sequence[Any],
    target_grams: Sequence[Sequence[Any]],
    layer_weights: Sequence[float],
    blend_weights: Sequence[float],
) -> Any:
    """Σ_styles β_i Σ_layers w_l · MSE(G_l, A_il) over the style layers.

    ``target_grams[i][l]`` is the Gram matrix of style image ``i`` at layer ``l``,
    computed once before the optimisation.
    """
    grams = [gram(f) for f in features]
    total: Any = 0.0
    for beta, targets in zip(blend_weights, target_grams, strict=True):
        per_image: Any = 0.0
        for weight, g, a in zip(layer_weights, grams, targets, strict=True):
            per_image = per_image + weight * mean_squared(g, a)
        total = total + beta * per_image
    return total


def tv_loss(image: Any) -> Any:
    """Mean squared difference of vertical plus horizontal neighbours of a (1, H, W, 3) image.

    Equals neural-style's Σdy²/((H−1)·W·3) + Σdx²/(H·(W−1)·3), on the
    mean-subtracted 0..255 pixels the optimiser works on.
    """
    dy = image[:, 1:, :, :] - image[:, :-1, :, :]
    dx = image[:, :, 1:, :] - image[:, :, :-1, :]
    return ops.mean(ops.square(dy)) + ops.mean(ops.square(dx))
