"""The straightforward Keras style transfer that ``bench style --reference`` measures against.

Written here in the structure of the keras.io "Neural style transfer" example
(examples/generative/neural_style_transfer.py), which is how most users first
write it: a feature extractor returning EVERY VGG19 layer's output, a batch of
three images (content, style, result) through the whole network at every step,
the fixed targets recomputed each time, a ``tf.function`` computing the loss and
the gradient, and a ``keras.optimizers.SGD`` with ``ExponentialDecay(100, 100,
0.96)`` applying it in eager Python. TensorFlow backend only, as the example is.

Same losses as ours (content relu4_2, style relu1_1..relu5_1 with Gram matrices
normalised by size, TV), so the two do the same arithmetic per useful FLOP;
the difference is the wasted work and the Python between the steps.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

STYLE_LAYERS = tuple(f"block{i}_conv1" for i in range(1, 6))
CONTENT_LAYER = "block4_conv2"


def build(vgg: Any, content: np.ndarray, style: np.ndarray) -> tuple[Any, Any, Any]:
    """(step, image variable, optimizer) for VGG-preprocessed float32 (1, H, W, 3) arrays."""
    import keras
    import tensorflow as tf

    extractor = keras.Model(vgg.inputs, {layer.name: layer.output for layer in vgg.layers})
    base = tf.constant(content)
    reference = tf.constant(style)
    image = tf.Variable(content.copy())
    height, width = content.shape[1:3]

    def gram(x: Any) -> Any:
        features = tf.reshape(x, (-1, x.shape[-1]))
        return tf.matmul(features, features, transpose_a=True) / tf.cast(
            tf.size(features), tf.float32
        )

    def compute_loss(combination: Any) -> Any:
        features = extractor(tf.concat([base, reference, combination], axis=0))
        content_f = features[CONTENT_LAYER]
        loss = tf.reduce_mean(tf.square(content_f[2] - content_f[0]))
        for name in STYLE_LAYERS:
            layer = features[name]
            loss += 10.0 / len(STYLE_LAYERS) * tf.reduce_mean(
                tf.square(gram(layer[2]) - gram(layer[1]))
            )
        dy = combination[:, 1:, :, :] - combination[:, :-1, :, :]
        dx = combination[:, :, 1:, :] - combination[:, :, :-1, :]
        tv = tf.reduce_sum(tf.square(dy)) / ((height - 1) * width * 3) + tf.reduce_sum(
            tf.square(dx)
        ) / (height * (width - 1) * 3)
        return loss + 100.0 * tv

    @tf.function
    def loss_and_grads(combination: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            loss = compute_loss(combination)
        return loss, tape.gradient(loss, combination)

    optimizer = keras.optimizers.SGD(
        keras.optimizers.schedules.ExponentialDecay(100.0, decay_steps=100, decay_rate=0.96)
    )
    return loss_and_grads, image, optimizer


def run(vgg: Any, content: np.ndarray, style: np.ndarray, iterations: int) -> dict[str, Any]:
    """Time ``iterations`` steps the keras.io way; the first (tracing) one is left out."""
    step, image, optimizer = build(vgg, content, style)
    loss, grads = step(image)
    optimizer.apply_gradients([(grads, image)])
    first = float(loss)
    start = time.perf_counter()
    for _ in range(iterations - 1):
        loss, grads = step(image)
        optimizer.apply_gradients([(grads, image)])
    last = float(loss)  # on the host: every step before it has finished
    seconds = time.perf_counter() - start
    return {
        "iterations_per_sec": (iterations - 1) / seconds if iterations > 1 else None,
        "loss_first": first,
        "loss_last": last,
    }
