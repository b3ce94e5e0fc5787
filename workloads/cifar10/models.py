"""The benchmark's models, written once in Keras 3 so they run on every backend.

``cnn`` is the TensorFlow tutorial's CIFAR-10 network (``cifar10_train.py``):
two 5x5x64 convolution blocks with max pooling and local response
normalisation, dense 384 and 192, 10 logits, on 24x24 crops. The others are
Keras applications with random initialisation, as in seeds 002 and 004.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import keras
from keras import layers, ops

NUM_CLASSES = 10


@dataclass(frozen=True)
class ModelSpec:
    """How a model is fed: input size, the tutorial's crop, and how to build it."""

    name: str
    image_size: int
    crop: int | None  # training crop taken before any resize (the tutorial CNN's 24 px)
    build: Callable[[int], keras.Model]
    description: str


def lrn_ops(inputs: Any, depth_radius: int, bias: float, alpha: float, beta: float) -> Any:
    """LRN across channels written with ``keras.ops``: the JAX and PyTorch path.

    The window sum of squares is accumulated in float32 whatever the input dtype:
    under mixed_float16 the squares of activations above ~85 already overflow a
    float16 sum of nine channels.
    """
    x = ops.cast(inputs, "float32")
    squared = ops.square(x)
    r = depth_radius
    channels = x.shape[-1]
    padded = ops.pad(squared, [[0, 0], [0, 0], [0, 0], [r, r]])
    window_sum = padded[..., 0:channels]
    for offset in range(1, 2 * r + 1):
        window_sum = window_sum + padded[..., offset : offset + channels]
    return ops.cast(x / ops.power(bias + alpha * window_sum, beta), inputs.dtype)


def lrn_tensorflow(inputs: Any, depth_radius: int, bias: float, alpha: float, beta: float) -> Any:
    """TensorFlow's fused LRN kernel (oneDNN on CPUs, cuDNN on GPUs), in float32.

    One fused op and its fused gradient instead of ~20 element-wise ops per
    layer; float32 for the same overflow reason as :func:`lrn_ops`.
    """
    import tensorflow as tf

    x = tf.cast(inputs, tf.float32)
    y = tf.nn.local_response_normalization(
        x, depth_radius=depth_radius, bias=bias, alpha=alpha, beta=beta
    )
    return tf.cast(y, inputs.dtype)


@keras.saving.register_keras_serializable(package="workloads")
class LocalResponseNorm(layers.Layer):
    """AlexNet-style local response normalisation across channels (tf.nn.lrn semantics).

    On the TensorFlow backend it is TensorFlow's fused kernel; on JAX and PyTorch
    the same formula in ``keras.ops`` (:func:`lrn_ops`). Both compute in float32
    under mixed precision and return the layer's compute dtype.
    """

    def __init__(
        self,
        depth_radius: int = 4,
        bias: float = 1.0,
        alpha: float = 0.001 / 9.0,
        beta: float = 0.75,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.depth_radius = depth_radius
        self.bias = bias
        self.alpha = alpha
        self.beta = beta

    def call(self, inputs: Any) -> Any:
        kernel = lrn_tensorflow if keras.backend.backend() == "tensorflow" else lrn_ops
        return kernel(inputs, self.depth_radius, self.bias, self.alpha, self.beta)

    def get_config(self) -> dict[str, Any]:
        config = super().get_config()
        config.update(
            depth_radius=self.depth_radius, bias=self.bias, alpha=self.alpha, beta=self.beta
        )
        return config


def tutorial_cnn(image_size: int = 24) -> keras.Model:
    """The TensorFlow tutorial CIFAR-10 CNN (conv-pool-norm, conv-norm-pool, 384, 192, 10)."""
    l2 = keras.regularizers.L2(0.004)
    inputs = keras.Input((image_size, image_size, 3))
    x = layers.Conv2D(64, 5, padding="same", activation="relu", name="conv1")(inputs)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool1")(x)
    x = LocalResponseNorm(name="norm1")(x)
    x = layers.Conv2D(64, 5, padding="same", activation="relu", name="conv2")(x)
    x = LocalResponseNorm(name="norm2")(x)
    x = layers.MaxPooling2D(3, strides=2, padding="same", name="pool2")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(384, activation="relu", kernel_regularizer=l2, name="local3")(x)
    x = layers.Dense(192, activation="relu", kernel_regularizer=l2, name="local4")(x)
    outputs = layers.Dense(NUM_CLASSES, dtype="float32", name="logits")(x)
    return keras.Model(inputs, outputs, name="cifar10_cnn")


def _application(factory: Callable[..., keras.Model]) -> Callable[[int], keras.Model]:
    def build(image_size: int) -> keras.Model:
        base = factory(
            weights=None,
            input_shape=(image_size, image_size, 3),
            classes=NUM_CLASSES,
            classifier_activation=None,
        )
        # Logits in float32 even under mixed precision, for a stable softmax loss.
        outputs = layers.Activation("linear", dtype="float32", name="logits")(base.output)
        return keras.Model(base.input, outputs, name=base.name)

    return build


MODELS: dict[str, ModelSpec] = {
    "cnn": ModelSpec("cnn", 24, 24, tutorial_cnn, "TensorFlow tutorial CNN, 24x24 crops"),
    "resnet50v2": ModelSpec(
        "resnet50v2",
        128,
        None,
        _application(keras.applications.ResNet50V2),
        "ResNet50V2 at 128x128",
    ),
    "resnet152v2": ModelSpec(
        "resnet152v2",
        128,
        None,
        _application(keras.applications.ResNet152V2),
        "ResNet152V2 at 128x128",
    ),
    "densenet121": ModelSpec(
        "densenet121",
        128,
        None,
        _application(keras.applications.DenseNet121),
        "DenseNet121 at 128x128",
    ),
}
